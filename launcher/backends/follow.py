"""Following a SLURM job: merged rank-prefixed logs while it runs, then how it ended.

Never blocks without a bound: the queue is read with squeue (which works without accounting),
results are read only once their files exist, and the whole wait has a deadline.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.run_dir import RunPaths

POLL_S = 1.0
SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.*)")
CANCELLED = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT (\S+) \*\*\*")  # slurmstepd's line for a scancel
QUERY_TIMEOUT_S = 30


class LogTail:
    """New complete lines of a file that another host is still writing."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, b""

    def lines(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        *done, self.partial = (self.partial + chunk).split(b"\n")
        return [line.decode(errors="replace") for line in done]


def queue_state(job_id: str) -> str | None:
    """The job's state in squeue (PENDING, RUNNING, ...), or None once it has left the queue."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return "UNKNOWN"
    if out.returncode != 0:  # squeue errors on ids it no longer knows
        return None
    states = out.stdout.split()
    return states[0] if states else None


def cancel(job_id: str) -> None:
    subprocess.run(["scancel", str(job_id)], capture_output=True, timeout=QUERY_TIMEOUT_S)


def task_error(job, rank: int) -> str | None:
    """The traceback a task left in its result file, or None if it succeeded or has not finished."""
    from submitit.core.utils import pickle_load

    path = job.task(rank).paths.result_pickle
    if not path.exists():
        return None
    outcome, value = pickle_load(path)
    return value if outcome == "error" else None


def follow(job, paths: RunPaths, timeout_s: float, echo=print) -> int:
    """Prints every rank's output as it comes; returns the exit code the command should end with."""
    ranks = range(job.num_tasks)
    tails = [(r, LogTail(job.task(r).paths.stdout), LogTail(job.task(r).paths.stderr)) for r in ranks]
    deadline = time.monotonic() + timeout_s
    while True:
        _print_new(tails, echo)
        failed = next(((r, e) for r in ranks if (e := task_error(job, r))), None)
        if failed:
            # Read before our own scancel: a rank that failed because the job was cancelled (its peer
            # killed first) is not the cause.
            cancelled_at = _cancelled_at(job)
            cancel(job.job_id)  # the other ranks would wait on the dead one until their timeouts
            _print_new(tails, echo)
            why = (
                [f"dali-launch: job {job.job_id} ended without a result: cancelled at {cancelled_at}"]
                if cancelled_at
                else [f"dali-launch: rank {failed[0]} of job {job.job_id} failed:", failed[1].rstrip()]
            )
            print("\n".join([*_said(job), *why]), file=sys.stderr, flush=True)
            return 1
        if queue_state(job.job_id) is None:
            break
        if time.monotonic() > deadline:
            cancel(job.job_id)
            print(
                f"dali-launch: job {job.job_id} still running after {timeout_s:.0f} s; cancelled it",
                file=sys.stderr,
                flush=True,
            )
            return 1
        time.sleep(POLL_S)
    _print_new(tails, echo)
    return _ending(job, paths)


def _print_new(tails, echo) -> None:
    for rank, *files in tails:
        for tail in files:
            for line in tail.lines():
                echo(f"[rank {rank}] {line}")


def _stderr(job, rank: int) -> str:
    try:
        return job.task(rank).paths.stderr.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _cancelled_at(job) -> str | None:
    """When the job was cancelled (scancel), as slurmstepd wrote it into a rank's stderr, or None."""
    found = (CANCELLED.search(_stderr(job, rank)) for rank in range(job.num_tasks))
    return next((m.group(1) for m in found if m), None)


def _said(job) -> list[str]:
    """What to read first: srun's word on tasks that died ("task 1: Killed") and our tasks' one-line
    errors (watchdog, timeouts); a rank that fails only because a peer died comes after them."""
    lines = []
    for rank in range(job.num_tasks):
        for line in _stderr(job, rank).splitlines():
            died = SRUN_TASK.match(line)
            if died:  # srun counts tasks as we count ranks
                node, tasks, what = died.groups()
                lines.append(f"dali-launch: rank{'s' if tasks[1:] else ''} {tasks} on {node}: {what} (srun)")
            elif line.startswith("dali-launch: "):
                lines.append(line)
    return list(dict.fromkeys(lines))


def started_tasks(paths: RunPaths, planned: int | None) -> int:
    """The tasks of the job's latest start: as planned, or, for a --nodes range (planned None), as many
    as rank_map.json lists (SLURM's pick; 1 before any start wrote it)."""
    if planned:
        return planned
    try:
        return len(json.loads(paths.rank_map.read_text())) or 1
    except (OSError, ValueError):
        return 1


def _ending(job, paths: RunPaths) -> int:
    tasks = (
        started_tasks(paths, TaskSpec.load(paths.root).layout.num_processes) if paths.config.exists() else job.num_tasks
    )
    missing = [r for r in range(tasks) if not job.task(r).paths.result_pickle.exists()]
    if missing:
        print(
            "\n".join(
                [
                    *_said(job),
                    f"dali-launch: job {job.job_id} ended without a result from rank(s) {missing}: "
                    f"cancelled, timed out or killed; see `dali-launch logs {job.job_id} --rank {missing[0]}`",
                ]
            ),
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0
