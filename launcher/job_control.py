"""`dali-launch status / logs / cancel`: a run, found by its SLURM job id or its run directory.

Every mode is covered: a SLURM job (job.json, written at submission) is asked of the queue and read
from submitit's logs; a local or `train` run is read from its run directory alone (its ranks' logs
and reports; live while its launcher or process 0 holds the run directory's lock).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from dali_launch.launcher.backends.follow import (
    QUERY_TIMEOUT_S,
    LogTail,
    cancel,
    queue_state,
    started_tasks,
)
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, is_locked


def _num_tasks(paths: RunPaths) -> int:
    return started_tasks(paths, TaskSpec.load(paths.root).layout.num_processes)


class SubmittedRun:
    """A run directory that holds a SLURM job."""

    def __init__(self, paths: RunPaths):
        self.paths = paths
        info = json.loads((paths.root / "job.json").read_text())
        self.job_id, self.folder = str(info["job_id"]), Path(info["submitit"])
        self.num_tasks = _num_tasks(paths)
        self.name = f"job {self.job_id}"

    def logs(self, rank: int) -> list[Path]:
        return [self.folder / self.job_id / f"{self.job_id}_{rank}_log.{stream}" for stream in ("out", "err")]

    def live(self) -> bool:
        return queue_state(self.job_id) is not None

    def state(self) -> str:
        """The queue's state, else accounting's (sacct) where it exists, else what the files say."""
        return queue_state(self.job_id) or _sacct_state(self.job_id) or self._state_from_files()

    def _state_from_files(self) -> str:
        results = list((self.folder / self.job_id).glob("*_result.pkl"))
        if self.paths.result.exists():
            return "COMPLETED"
        return "ENDED (failed or cancelled)" if len(results) < self.num_tasks else "ENDED"

    def cancel(self) -> str:
        if not self.live():
            return f"job {self.job_id} is not in the queue any more; nothing to cancel"
        cancel(self.job_id)
        return f"cancelled job {self.job_id}"


class LocalRun:
    """A run started here: `dali-launch train` (one process) or `--local` (its rank processes)."""

    def __init__(self, paths: RunPaths):
        self.paths, self.num_tasks, self.name = paths, _num_tasks(paths), f"run {paths.root.name}"

    def logs(self, rank: int) -> list[Path]:
        return [self.paths.log(rank)]

    def live(self) -> bool:
        """A job runs in it: its launcher or process 0 holds a lock in it (released when they die)."""
        return any(is_locked(self.paths.lock(holder)) for holder in ("launcher", "task"))

    def _rank_pids(self) -> list[int]:
        """The pids its ranks reported, those on this host."""
        pids = []
        for rank in range(self.num_tasks):
            try:
                report = json.loads(self.paths.rank_report(rank).read_text())
            except (OSError, ValueError):
                continue
            if report.get("host") in (socket.gethostname(), os.environ.get("SLURMD_NODENAME")):
                pids.append(report["pid"])
        return pids

    def state(self) -> str:
        if self.paths.result.exists():
            return "COMPLETED"
        if self.live():
            return "RUNNING"
        checkpoints = self.paths.checkpoints
        saved = checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir())
        return (
            f"ENDED without a result (failed or interrupted){'; resumable from its checkpoint' if saved else ''}: "
            f"`dali-launch --resume {self.paths.root}`"
        )

    def cancel(self) -> str:
        """SIGTERM to its ranks: they write a checkpoint and stop, as after Ctrl-C."""
        pids = self._rank_pids() if self.live() else []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return (
            f"stopping {self.name} (SIGTERM to {len(pids)} processes)"
            if pids
            else f"{self.name} is not running; nothing to cancel"
        )


def find(job: str, run_root: str) -> SubmittedRun | LocalRun:
    """JOB is a run directory (any mode), or a SLURM job id looked up among the runs under --run-root."""
    paths = RunPaths(Path(job))
    if (paths.root / "job.json").is_file():
        return SubmittedRun(paths)
    if paths.config.is_file():
        return LocalRun(paths)
    if paths.root.is_dir():
        raise UsageError(f"{paths.root} is not a run directory (no config.json); pass one that dali-launch made")
    root = Path(run_root)
    for run in sorted(root.glob("*/job.json"), reverse=True):
        if str(json.loads(run.read_text()).get("job_id")) == job:
            return SubmittedRun(RunPaths(run.parent))
    raise UsageError(f"no run of job {job} under --run-root {root.absolute()}; pass its run directory instead")


def status(run: SubmittedRun | LocalRun) -> str:
    """One line: its state, the last epoch's accuracy, where it lives."""
    metrics = run.paths.metrics
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    last = json.loads(lines[-1]) if lines else None
    progress = f"; epoch {last['epoch']} test accuracy {last['test_accuracy']:.4f}" if last else ""
    return f"{run.name}: {run.state()}{progress}; run directory {run.paths.root}"


def _sacct_state(job_id: str) -> str | None:
    if shutil.which("sacct") is None:
        return None
    try:
        out = subprocess.run(
            ["sacct", "-n", "-X", "-j", job_id, "-o", "State"], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return None
    words = out.stdout.split() if out.returncode == 0 else []
    return words[0] if words else None


def logs(run: SubmittedRun | LocalRun, rank: int | None, follow_s: float | None, echo=print) -> None:
    """Prints rank logs (all ranks prefixed, or one); with follow, until the run ends (or follow_s passes)."""
    ranks = [rank] if rank is not None else list(range(run.num_tasks))
    if any(r < 0 or r >= run.num_tasks for r in ranks):
        raise UsageError(f"--rank {rank} is out of range; {run.name} has ranks 0..{run.num_tasks - 1}")
    tails = [(r, LogTail(path)) for r in ranks for path in run.logs(r)]
    deadline = time.monotonic() + (follow_s or 0)
    while True:
        for r, tail in tails:
            for line in tail.lines():
                echo(line if rank is not None else f"[rank {r}] {line}")
        if follow_s is None or not run.live() or time.monotonic() > deadline:
            break
        time.sleep(1)
    for r, tail in tails:  # the last line may lack its newline
        if tail.partial:
            text = tail.partial.decode(errors="replace")
            echo(text if rank is not None else f"[rank {r}] {text}")


def cancel_job(run: SubmittedRun | LocalRun) -> str:
    return run.cancel()
