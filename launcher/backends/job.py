"""A run's job as the launcher sees it after the start: one handle, one state vocabulary.

`dali-launch status`, `logs`, `cancel`, `runs`, `sweep status` and `--resume`'s "is it still live?" all
ask a `BackendJob` (submitit's Job is the model; the Python API's `Job`, launcher/api/handle.py, wraps one):
`state()`, `logs(rank)`, `cancel()`. Each backend attaches one to a run directory (`Backend.attach`); this
module holds what they share: the states, how an ended run ended (its files say it), the job record of a
submitted run (job.json, written here only), and the handle of a run whose processes run on this host
(`train`, --local, a task of the user's srun step).
"""

from __future__ import annotations

import enum
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from dali_launch.launcher.run_config import counted
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.resilience import ending, saved
from dali_launch.trainer.run_dir import RunPaths, is_locked, note, parse_json, read_json, read_jsonl, write_atomic

LOCK_HOLDERS = ("launcher", "task")  # local mode's launcher, and process 0 of the task in every mode
STOP_WAIT_S = 90  # how long `cancel` waits for the ranks to checkpoint and stop (the launcher grants 60)
POLL_S = 0.2
STALE_S = 60  # a running epoch's progress older than this is said with its age (process 0 writes it every 5 s)


class RunState(str, enum.Enum):
    """Where a run stands; the one vocabulary of every command that says it."""

    PENDING = "pending"  # queued (SLURM), or requeued and waiting
    RUNNING = "running"
    FINISHED = "finished"  # result.json is there
    INTERRUPTED = "interrupted"  # every rank stopped after a checkpoint (a signal): --resume continues it
    CANCELLED = "cancelled"  # `dali-launch cancel` (or scancel) stopped it
    FAILED = "failed"  # any other end: a rank raised, a watchdog gave up, it died without a word
    NOT_STARTED = "not started"  # its directory is made, nothing ran in it yet (a sweep's later points)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:  # f"{state}" is its word (Python 3.11 formats mixed-in enums by name)
        return format(self.value, spec)

    @property
    def live(self) -> bool:
        return self in (RunState.PENDING, RunState.RUNNING)

    def __call__(self) -> RunState:  # the Python API's `job.state` is a property, as submitit's; `job.state()` too
        return self


def ended_state(paths: RunPaths, cancelled: bool = False) -> RunState:
    """How a run that nothing runs in any more ended, from its files (`cancelled`: its scheduler says so). The
    scheduler's word yields to a rank's failure: the SLURM follower cancels a job one of whose ranks failed
    (so the others stop waiting on it), and that run failed; `dali-launch cancel` records itself first."""
    if paths.result.exists():
        return RunState.FINISHED
    if paths.cancel.exists():
        return RunState.CANCELLED
    hows = {e["how"] for e in ending.read(paths)}
    if cancelled and not hows & set(ending.CAUSES):
        return RunState.CANCELLED
    if hows == {ending.STOPPED}:
        return RunState.INTERRUPTED
    if not hows and not paths.manifest.exists():
        return RunState.NOT_STARTED
    return RunState.FAILED


def lock_holder(paths: RunPaths) -> str | None:
    """Who holds the run's lock: its launcher or its process 0 (released by the kernel when they die)."""
    return next((holder for holder in LOCK_HOLDERS if is_locked(paths.lock(holder))), None)


def spec_of(paths: RunPaths) -> TaskSpec | None:
    """The run's task spec (config.json), or None where it is damaged: noted, with what is wrong."""
    try:
        return TaskSpec.load(paths.root)
    except OSError as e:
        note(paths.config, f"cannot be read ({e.strerror})")
    except (ValueError, KeyError, TypeError) as e:  # cut short, not JSON, or not a spec this version reads
        _, why = parse_json(paths.config)
        note(paths.config, f"is damaged ({why or e}); the run's settings are unknown")
    return None


def started_tasks(paths: RunPaths) -> int:
    """The tasks of the run's latest start: as planned (config.json), or, for a --nodes range, as many as
    rank_map.json lists (SLURM's pick; 1 before any start wrote it, or where config.json is damaged)."""
    spec = spec_of(paths)
    planned = spec.layout.num_processes if spec else None
    return planned or len(read_json(paths.rank_map, [], kind=list)) or 1


def why_ended(paths: RunPaths, state: RunState) -> str:
    """What ended a run that failed or was stopped, as its ranks recorded it (endings/): the earliest cause
    (a raise, a fault, a watchdog's verdict, a refusal of the task's own), or the stop; '' otherwise."""
    endings = ending.read(paths)
    if state is RunState.FAILED:
        causes = [e["line"] for e in endings if e["how"] in ending.CAUSES]
        return causes[0] if causes else "no rank said why (see `dali-launch logs`)"
    if state is RunState.INTERRUPTED:
        return next((e["line"].split("; ")[0] for e in endings if e["how"] == ending.STOPPED), "")
    return ""


def doing(paths: RunPaths) -> str:
    """What a running run's process 0 says it does (progress.json, trainer/observe/progress.py): a phase (of its
    start-up, or an epoch's end) and for how long, or its epoch and step, and how old that is once it is older
    than a step should take; '' before it said anything."""
    said, now = read_json(paths.progress, {}), time.time()
    text, since, at = said.get("doing"), said.get("since"), said.get("at")
    if not (isinstance(text, str) and isinstance(since, (int, float)) and isinstance(at, (int, float))):
        return ""
    if not said.get("stepping"):
        return f"{text}, for {_seconds(now - since)}"
    return f"{text}, said {_seconds(now - at)} ago" if now - at > STALE_S else text


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def requeued(paths: RunPaths) -> str:
    """What requeued the run's SLURM job (requeues.jsonl: since its submission), as `status` says it; '' if nothing."""
    said = read_jsonl(paths.requeues)
    if not said:
        return ""
    last = said[-1].get("why") or "its task"
    return f"requeued by {last}" if len(said) == 1 else f"requeued {len(said)} times, the last by {last}"


def last_write(paths: RunPaths) -> float:
    """When an ended run last wrote: its result, metrics, endings or heartbeats."""
    files = [paths.result, paths.metrics, paths.config, *paths.endings.glob("*"), *paths.heartbeats.glob("*")]
    return max(p.stat().st_mtime for p in files if p.exists())


def resume_hint(paths: RunPaths) -> str:
    """Where an unfinished run would go on from, and the command; '' without a checkpoint, or where its
    failure said resuming would do the same again (its ending `resumable` false: every step diverged)."""
    newest = saved.newest(paths)
    if newest is None or any(e.get("resumable") is False for e in ending.read(paths)):
        return ""
    return f"resume from step {newest.step} with `dali-launch --resume {paths.root}`"


# --- job.json: a submitted run's job ----------------------------------------------------------------


@dataclass(frozen=True)
class JobRecord:
    """The SLURM job a run was submitted as (an array's element: `ARRAY_INDEX`), and submitit's folder."""

    job_id: str
    folder: Path  # submitit's folder; the job's own files are in folder/JOB_ID/


def write_record(paths: RunPaths, job_id: str, folder: Path) -> None:
    """The one writer of job.json, once sbatch took the job."""
    write_atomic(paths.job, json.dumps({"job_id": job_id, "submitit": str(folder)}))


def read_record(paths: RunPaths) -> JobRecord | None:
    """The run's job, or None: never submitted, or job.json damaged (noted: its state is then its files')."""
    info = read_json(paths.job)
    if info is None or info.get("job_id") is None:
        if info is not None:
            note(paths.job, "is damaged (no job_id in it); read as missing")
        return None
    return JobRecord(str(info["job_id"]), Path(info.get("submitit") or paths.submitit))


def request_cancel(paths: RunPaths) -> None:
    """Recorded before any signal is sent, so whoever follows the run (the launcher) reads the ranks'
    stop as a cancel, not a failure."""
    write_atomic(paths.cancel, json.dumps({"at": time.time(), "pid": os.getpid(), "host": socket.gethostname()}))


def cancel_requested(paths: RunPaths, since: float = 0.0) -> bool:
    """`dali-launch cancel` asked this run to stop at or after `since` (time.time())."""
    at = read_json(paths.cancel, {}).get("at")
    return isinstance(at, (int, float)) and at >= since


# --- the handles ------------------------------------------------------------------------------------


class BackendJob:
    """A run's job, attached to its directory. Subclasses say how it is live, where its logs are, how it stops."""

    def __init__(self, paths: RunPaths):
        self.paths = paths

    @property
    def name(self) -> str:
        return f"run {self.paths.root.name}"

    @property
    def num_tasks(self) -> int:
        return started_tasks(self.paths)

    def live_state(self) -> RunState | None:
        """PENDING or RUNNING while a job runs in the directory, else None."""
        raise NotImplementedError

    def settle(self, say=print) -> None:
        """Waits (bounded) for a job that has stopped but is not yet released, saying so; most never need to."""

    def state(self) -> RunState:
        if self.paths.result.exists():
            return RunState.FINISHED
        return self.live_state() or self.ended()

    def ended(self) -> RunState:
        return ended_state(self.paths)

    def logs(self, rank: int) -> list[Path]:
        raise NotImplementedError

    def cancel(self, say=print) -> int:
        """Stops the run; says what happened; the exit code of `dali-launch cancel`."""
        raise NotImplementedError


class LocalJob(BackendJob):
    """A run whose processes run on this host: `dali-launch train` (one process), --local (its rank
    processes), a task of the user's srun step. Live while its launcher or process 0 holds its lock."""

    def live_state(self) -> RunState | None:
        return RunState.RUNNING if lock_holder(self.paths) else None

    def logs(self, rank: int) -> list[Path]:
        return [self.paths.log(rank)]

    def rank_pids(self) -> list[int]:
        """The pids its ranks reported, those on this host."""
        pids = []
        for rank in range(self.num_tasks):
            report = read_json(self.paths.rank_report(rank), {})
            if report.get("host") in (socket.gethostname(), os.environ.get("SLURMD_NODENAME")) and "pid" in report:
                pids.append(report["pid"])
        return pids

    def cancel(self, say=print) -> int:
        """SIGTERM to its ranks: they write a checkpoint and stop, as after Ctrl-C; then waits (bounded)
        until the run has ended, which it then says: `cancelled`, with where it would resume."""
        pids = self.rank_pids() if self.live_state() else []
        if not pids:
            say(f"{self.name} is not running; nothing to cancel")
            return 0
        request_cancel(self.paths)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        say(f"stopping {self.name} (SIGTERM to {counted(len(pids), 'process')})")
        end = time.monotonic() + STOP_WAIT_S
        while self.live_state() and time.monotonic() < end:
            time.sleep(POLL_S)
        state = self.state()
        if state.live:
            say(f"{self.name} is still stopping after {STOP_WAIT_S} s; see `dali-launch status {self.paths.root}`")
            return 1
        hint = resume_hint(self.paths) if state is not RunState.FINISHED else ""
        say(f"{self.name}: {state}" + (f"; {hint}" if hint else ""))
        return 0
