"""The handle of a run the Python API started (Executor.submit), with submitit's Job as the model: where the run
stands, its result, its metrics, its logs, its cancel, in every mode alike.

It reads the run directory and asks the run's job as `dali-launch status/logs/cancel` do (backends/job.py): the
follower process of a run here or --local (backends/detached.py), SLURM's queue for a SLURM job. Every wait is
bounded: `wait` and `result` by their `timeout_s`, WAIT_S (an hour) unless told, and `cancel` by job.STOP_WAIT_S.
"""

from __future__ import annotations

import time
from pathlib import Path

from dali_launch.launcher.backends.detached import DetachedJob
from dali_launch.launcher.backends.job import STOP_WAIT_S, BackendJob, RunState, resume_hint, why_ended
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.observe.library_output import untagged
from dali_launch.trainer.run_dir import read_json, read_jsonl

WAIT_S = 3600  # how long `wait` and `result` wait unless told
POLL_S = 0.5  # a run on this machine: its follower and files
SLURM_POLL_S = 2.0  # SLURM's queue is asked at most this often


class RunFailed(RuntimeError):
    """A run that ended without its result (failed, cancelled, interrupted); the message is the run's own reason."""


class Job:
    """A run the Python API started: `run_dir`, `job_id` (SLURM's, else None), and its methods."""

    def __init__(self, job: BackendJob, mode: str):
        self._job, self.mode = job, mode

    def __repr__(self) -> str:
        return f"Job({self.mode!r}, {str(self.run_dir)!r})"

    @property
    def run_dir(self) -> Path:
        return self._job.paths.root

    @property
    def job_id(self) -> str | None:
        return getattr(self._job, "job_id", None)

    @property
    def state(self) -> RunState:
        """pending, running, finished, interrupted, cancelled, failed or not started (a str: `== "finished"`), read
        afresh each time, as submitit's `job.state` is; dali-launch's words, which `status` says, not SLURM's: a
        run outlives its job (requeued, resumed) and a run here has none. `job.state()` reads the same."""
        return self._job.state()

    def done(self) -> bool:
        """Whether the run has ended, however it ended."""
        return not self.state.live

    def wait(self, timeout_s: float = WAIT_S) -> RunState:
        """Until the run has ended, at most `timeout_s`: its state then; a TimeoutError past it (the run goes on)."""
        return self._wait(timeout_s, "give timeout_s= to wait longer")

    def result(self, timeout_s: float | None = None) -> dict:
        """The run's result.json once it has finished, waiting at most `timeout_s` (WAIT_S, an hour, unless told:
        a TimeoutError says so); a run that ended otherwise raises RunFailed with its own reason."""
        if timeout_s is None:
            state = self._wait(WAIT_S, "result()'s default; give result(timeout_s=...) to wait longer")
        else:
            state = self._wait(timeout_s, "give timeout_s= to wait longer")
        result = read_json(self._job.paths.result) if state is RunState.FINISHED else None
        if result is None:
            raise RunFailed(self._why(state))
        return result

    def _wait(self, timeout_s: float, longer: str) -> RunState:
        end, poll_s = time.monotonic() + timeout_s, SLURM_POLL_S if self.mode == "slurm" else POLL_S
        while (state := self.state).live:
            if time.monotonic() > end:
                raise TimeoutError(
                    f"{self._job.name} is still {state} after {timeout_s:g} s ({longer}); it goes on, cancel() stops it"
                )
            time.sleep(poll_s)
        return state

    def metrics(self) -> list[dict]:
        """The rows of metrics.jsonl so far, one an epoch."""
        return read_jsonl(self._job.paths.metrics)

    def logs(self, rank: int = 0) -> str:
        """What rank `rank` has written so far (a SLURM task's stdout, then its stderr)."""
        files = self._job.logs(self._rank(rank))
        return "".join(untagged(path.read_text(errors="replace")) for path in files if path.exists())

    def stdout(self, rank: int = 0) -> str | None:
        """What rank `rank` has written to its stdout so far, as submitit's `job.stdout()`: None before it wrote
        anything. A run here or --local keeps a rank's stdout and stderr in one log, in the order they came (as the
        console shows them): stdout() and stderr() both read it."""
        return self._read(self._job.logs(self._rank(rank))[0])

    def stderr(self, rank: int = 0) -> str | None:
        """What rank `rank` has written to its stderr so far, as submitit's `job.stderr()` (see stdout)."""
        return self._read(self._job.logs(self._rank(rank))[-1])

    def _rank(self, rank: int) -> int:
        tasks = self._job.num_tasks
        if not isinstance(rank, int) or not 0 <= rank < tasks:
            raise UsageError(f"rank={rank!r} is out of range; {self._job.name} has ranks 0..{tasks - 1}")
        return rank

    @staticmethod
    def _read(path: Path) -> str | None:
        return untagged(path.read_text(errors="replace")) if path.exists() else None

    def cancel(self, timeout_s: float = STOP_WAIT_S) -> RunState:
        """Stops the run as `dali-launch cancel` does (its ranks checkpoint, then stop); its state once it ended,
        waiting at most `timeout_s`."""
        self._job.cancel(say=lambda line: None)
        return self.wait(timeout_s)

    def _why(self, state: RunState) -> str:
        """The run's own reason: what its ranks recorded (endings/), else what ended its follower, then where it
        would resume."""
        why = why_ended(self._job.paths, state)
        if state in (RunState.FAILED, RunState.NOT_STARTED) and (not why or why.startswith("no rank said why")):
            why = self._follower_said() or why
        hint = resume_hint(self._job.paths) if state is not RunState.NOT_STARTED else ""
        return f"{self._job.name} {state}" + (f": {why}" if why else "") + (f"; {hint}" if hint else "")

    def _follower_said(self) -> str:
        """A run here or --local: a signal that killed its follower, else the follower's last line of its own (a
        refusal: `dali-launch: error: ...`)."""
        if not isinstance(self._job, DetachedJob):
            return ""
        log = self._job.paths.follower_log
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        said = [
            line.removeprefix("dali-launch: ").removeprefix("error: ")
            for line in lines
            if line.startswith("dali-launch: ")
        ]
        return self._job.follower_killed() or (said[-1] if said else "")
