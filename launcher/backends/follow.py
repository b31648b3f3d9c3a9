"""Following a job: new lines of its logs as they come (LogTail), and a SLURM job's merged, rank-prefixed
output until it ends, then how it ended (slurm_queue.py asks SLURM itself).

Never blocks without a bound: the queue is read with squeue (which works without accounting),
results are read only once their files exist, and the whole wait has a deadline.

O(1) files per poll, whatever the job's size (on a shared file system each open is a metadata
operation): rank 0's logs and FOLLOWED_PER_POLL other ranks' in turn (every rank's lines come, a
large job's a few seconds late), the job's cause (trainer/resilience/ending.py) and the result of the
rank it names. Every rank's logs and results are read once, when the job has left the queue.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from dali_launch.launcher.backends.job import started_tasks
from dali_launch.launcher.backends.slurm_queue import (
    QUEUED_FOLLOW_S,
    WAITING,
    cancel,
    queue_entry,
    wait_until_gone,
    waiting_line,
)
from dali_launch.launcher.console import RankLines
from dali_launch.trainer.observe.library_output import untagged
from dali_launch.trainer.resilience import ending, saved
from dali_launch.trainer.run_dir import RunPaths

POLL_S = 1.0
SRUN_WORD_S = 10  # a failed job's wait to leave the queue (srun then has written its lines) before we tell its story
FOLLOWED_PER_POLL = 8  # ranks' logs read per poll besides rank 0's: a job of up to 9 ranks is read whole each time
SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.*)")
CANCELLED = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT (\S+) \*\*\*")  # slurmstepd's line for a scancel


class LogTail:
    """New complete lines of a file that another host is still writing."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, b""
        self.console = RankLines()  # what of its lines the console shows (a rank's stream: gloo cuts its lines)

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


def task_error(job, rank: int) -> str | None:
    """The traceback a task left in its result file, or None if it succeeded or has not finished."""
    from submitit.core.utils import pickle_load

    path = job.task(rank).paths.result_pickle
    if not path.exists():
        return None
    outcome, value = pickle_load(path)
    return value if outcome == "error" else None


def follow(job, paths: RunPaths, timeout_s: float, echo=print) -> int:
    """Prints every rank's output as it comes; returns the exit code the command should end with.
    `timeout_s` bounds each start of the job (it runs again after a requeue); the queue's wait has its own bound."""
    tails = [(r, LogTail(job.task(r).paths.stdout), LogTail(job.task(r).paths.stderr)) for r in range(job.num_tasks)]
    deadline, queued_until, polls = time.monotonic() + timeout_s, time.monotonic() + QUEUED_FOLLOW_S, 0
    waiting = None  # the state and reason last said of the job's wait in the queue
    while True:
        _print_new(_due(tails, polls), echo, paths)
        polls += 1
        state, reason = queue_entry(job.job_id)
        waiting = _say_waiting(job.job_id, state, reason, waiting, echo)
        gone = state is None
        # Queued, or requeued (a time limit's warning, a preemption): its clock starts when it runs.
        if state in WAITING:
            deadline = time.monotonic() + timeout_s
        failed = _failure(job, paths, every_rank=gone)
        if failed:
            # Read before our own scancel: a rank that failed because the job was cancelled (its peer
            # killed first) is not the cause.
            cancelled = cancelled_at(job)
            cancel(job.job_id)  # the other ranks would wait on the dead one until their timeouts
            gone = wait_until_gone(job.job_id, timeout_s=SRUN_WORD_S)  # srun's last words written
            _print_new(tails, echo, paths)
            failed = _failure(job, paths, every_rank=True) or failed  # once, at the end: every rank's word
            if cancelled:
                story = [*_said(job), f"dali-launch: job {job.job_id} ended without a result: cancelled at {cancelled}"]
            else:
                _record_killed(job, paths)  # srun's word is complete once the job has left the queue
                story = _first_story(job, paths, failed)
            print("\n".join(story), file=sys.stderr, flush=True)
            if gone or wait_until_gone(job.job_id):  # so that `--resume` right after us does not find it COMPLETING
                saved.drop_unfinished(paths)  # its writers gone: what a refused write's peers added after
            return 1
        if gone:
            break
        late = _out_of_time(job, paths, state in WAITING, time.monotonic() > deadline, time.monotonic() > queued_until)
        if late:
            return late
        time.sleep(POLL_S)
    _print_new(tails, echo, paths)
    return _ending(job, paths)


def _say_waiting(job_id: str, state: str | None, reason: str, said: tuple | None, echo) -> tuple | None:
    """Why a queued job waits, in squeue's words: once, and again when it changes (a requeue waits anew);
    squeue's "None" (not looked at yet) is no reason. What was said, for the next poll."""
    if state not in WAITING:
        return None
    if reason in ("", "None") or (state, reason) == said:
        return said
    echo(waiting_line(job_id, state, reason))
    return state, reason


def _out_of_time(job, paths: RunPaths, waiting: bool, ran_too_long: bool, queued_too_long: bool) -> int | None:
    """A job that ran past its bound has outlived SLURM's own time limit: cancelled. One that SLURM keeps
    queued past QUEUED_FOLLOW_S stays queued; the follower stops and says how to reach it. Else None."""
    if waiting and queued_too_long:
        say = f"job {job.job_id} still waits in the queue after {QUEUED_FOLLOW_S // 3600} h; it stays queued"
        say += f"; follow it with `dali-launch logs {paths.root} --follow`, or stop it with `dali-launch cancel {paths.root}`"
    elif ran_too_long and not waiting:
        cancel(job.job_id)
        say = f"job {job.job_id} still running past its time limit; cancelled it"
    else:
        return None
    print(f"dali-launch: {say}", file=sys.stderr, flush=True)
    return 1


def _due(tails: list, polls: int) -> list:
    """The logs this poll reads: rank 0's, and the next FOLLOWED_PER_POLL ranks' in turn."""
    others = tails[1:]
    if len(others) <= FOLLOWED_PER_POLL:
        return tails
    first = polls * FOLLOWED_PER_POLL % len(others)
    return [tails[0], *(others[(first + i) % len(others)] for i in range(FOLLOWED_PER_POLL))]


def _failure(job, paths: RunPaths, every_rank: bool) -> dict[int, str]:
    """{rank: traceback} of the tasks that failed: while the job runs, only the rank the job's cause names
    (if its result is written yet: one file per poll); with `every_rank` (the job left the queue, or it is
    being reported), every rank's."""
    if every_rank:
        ranks = range(job.num_tasks)
    else:
        cause = ending.cause(paths)
        ranks = [cause["rank"]] if cause and cause["rank"] < job.num_tasks else []
    return {r: e for r in ranks if (e := task_error(job, r))}


def _print_new(tails, echo, paths: RunPaths) -> None:
    """New lines of the run's own voice. Not a library's (tagged by the task: the logs keep them, `dali-launch
    logs` shows them), not srun's (the job's story retells them), and, once a rank ended the job in a line of
    ours (a refused checkpoint write), not the other ranks' reactions to it (a C++ abort's stack), as the
    local launcher does (backends/local.py). One small file read a poll (process 0 removes an earlier job's
    cause as it starts, before any rank speaks: ending.clear)."""
    explained = ending.explained_by(paths)
    for rank, *files in tails:
        for tail in files:
            for line in tail.lines():
                for part in tail.console.console(line):
                    if explained in (None, rank) and not part.startswith("srun: "):
                        echo(f"[rank {rank}] {part}")


def _stderr(job, rank: int) -> str:
    try:
        return job.task(rank).paths.stderr.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def cancelled_at(job) -> str | None:
    """When the job was cancelled (scancel), as slurmstepd wrote it into a rank's stderr, or None."""
    found = (CANCELLED.search(_stderr(job, rank)) for rank in range(job.num_tasks))
    return next((m.group(1) for m in found if m), None)


def _said(job) -> list[str]:
    """What to read first: srun's word on tasks that died ("task 1: Killed") and our tasks' one-line
    errors (watchdog, timeouts); a rank that fails only because a peer died comes after them."""
    lines = []
    for line in _stderr_lines(job):
        died = SRUN_TASK.match(line)
        if died:  # srun counts tasks as we count ranks
            node, tasks, what = died.groups()
            several = "," in tasks or "-" in tasks  # "tasks 2-3", not "task 15"
            lines.append(f"dali-launch: rank{'s' if several else ''} {tasks} on {node}: {what} (srun)")
        elif line.startswith("dali-launch: "):
            lines.append(line)
    return list(dict.fromkeys(lines))


def _stderr_lines(job):
    """Every rank's stderr, line by line, rank 0's first (where srun writes its own, in the order it saw)."""
    for rank in range(job.num_tasks):
        yield from _stderr(job, rank).splitlines()


def _record_killed(job, paths: RunPaths) -> None:
    """A rank that a signal killed (kill -9, the OOM killer) records no ending, and its peers' network errors
    that follow would be taken for the cause. srun names the tasks that ended in the order it saw them: where
    its first is a rank that a signal ended without a word, that rank's ending is recorded from srun's, before
    every other (they reacted to it), as the local launcher records its reaper's (backends/local.py)."""
    first = next(filter(None, map(SRUN_TASK.match, _stderr_lines(job))), None)
    if first is None or not first.group(2).isdigit() or first.group(3).startswith("Exited with exit code"):
        return
    rank, node, what = int(first.group(2)), first.group(1), first.group(3)
    if rank >= job.num_tasks or ending.of(paths, rank) is not None:
        return
    at = min((e["at"] for e in ending.read(paths)), default=time.time()) - 0.001
    ending.record(paths, rank, ending.FAILED, f"rank {rank} on {node} was killed first (srun: {what})", at=at)


def _first_story(job, paths: RunPaths, failed: dict[int, str]) -> list[str]:
    """What ended the job, the earliest failure first (endings/: the rank that raised, died or was given
    up on, by time), with its traceback; then srun's and the others' words, and the other tracebacks
    (a rank that failed because its peer died: a network error, after the cause)."""
    causes = [e for e in ending.read(paths) if e["how"] in ending.CAUSES]
    culprit = causes[0].get("culprit", causes[0]["rank"]) if causes else min(failed)
    head = [f"dali-launch: {causes[0]['line']}"] if causes else []
    if causes and causes[0].get("explained"):  # our own one-line error: what happened and the fix, alone
        return head
    first = failed.get(culprit)
    story = [*head, *([f"dali-launch: rank {culprit} of job {job.job_id} failed:", first.rstrip()] if first else [])]
    if not first:  # it died without a result (a signal): its own stderr's last lines
        story += [
            f"dali-launch: the last lines rank {culprit} wrote:",
            *untagged(_stderr(job, culprit)).splitlines()[-20:],
        ]
    story += _said(job)
    for rank, error in sorted(failed.items()):
        if rank != culprit:
            said = [
                line for line in error.splitlines() if line.strip() and not line.startswith(("For simplicity", "---"))
            ]
            story.append(f"dali-launch: then rank {rank} of job {job.job_id} failed too: {said[-1] if said else ''}")
    return story


def _ending(job, paths: RunPaths) -> int:
    tasks = started_tasks(paths) if paths.config.exists() else job.num_tasks
    missing = [r for r in range(tasks) if not job.task(r).paths.result_pickle.exists()]
    stopped = [e for e in ending.read(paths) if e["how"] == ending.STOPPED] if paths.config.exists() else []
    if missing and len(stopped) == tasks and not paths.cancel.exists():  # SLURM's time limit: each checkpointed
        print(f"dali-launch: job {job.job_id} {stopped[0]['line']}", file=sys.stderr, flush=True)
        return 1
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
