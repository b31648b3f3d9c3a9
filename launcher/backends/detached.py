"""A run on this machine, started and left to run (Backend.start: the Python API's `here` and `local` runs).

A follower process of its own runs the backend for the prepared run directory, as the CLI's launcher runs it in
the foreground: `train`'s task in the follower itself, --local's ranks under it, with their locks and logs; what
that launcher would print goes to the run's follower.log. The caller (a notebook) goes on: it neither runs JAX or
DALI nor has its signal handlers replaced, and its Ctrl-C (the follower has a session of its own) is not the run's.

What outlives what: no rank outlives its follower (each dies with it: PR_SET_PDEATHSIG, SIGKILL, as under the
CLI's --local), and the follower does not outlive its caller: once the caller's process is gone (the follower is
reparented) it sends itself one SIGTERM, which stops the run as Ctrl-C stops the CLI's (each rank checkpoints and
stops, within local.STOP_GRACE_S). Not the kernel's parent-death signal: that comes at the end of the thread that
started the follower, and again as the dying caller's other threads end -- a second stop signal, which kills the
ranks before they checkpoint. A cancel records itself (job.request_cancel), then stops the follower the same way,
so the run ends `cancelled`; a follower that does not stop within STOP_WAIT_S is killed, and its ranks with it.
Several runs at once (the Python API's submit_array) go one after another, each with its follower (Turns).

    python -m dali_launch.launcher.backends.detached CALLER_PID  < pickle of (backend, run, run directory)
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time

from dali_launch.launcher.backends.job import (
    STOP_WAIT_S,
    LocalJob,
    RunState,
    cancel_requested,
    request_cancel,
    resume_hint,
)
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience.ending import EXIT_FAILED, leave
from dali_launch.trainer.run_dir import RunPaths

MODULE = "dali_launch.launcher.backends.detached"
KILL_WAIT_S = 10  # a SIGKILLed follower is gone at once; reaping it is bounded all the same
CALLER_POLL_S = 0.2  # how often the follower looks whether its caller is still there


def start(backend, runs: list, paths: list[RunPaths]) -> list[DetachedJob]:
    """Prepared runs started and left to run, their jobs: one run's follower now; several one after another (Turns),
    the first now. `backend` (Train or Local) is handed over pickled, with each run."""
    if len(runs) == 1:
        return [DetachedJob(paths[0], _follower(backend, runs[0], paths[0]))]
    return Turns(backend, runs, paths).jobs


def _follower(backend, run, paths: RunPaths) -> subprocess.Popen:
    """The follower of one prepared run, started."""
    with paths.follower_log.open("ab") as log:
        follower = subprocess.Popen(
            [sys.executable, "-m", MODULE, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        with follower.stdin:
            follower.stdin.write(pickle.dumps((backend, run, str(paths.root))))
    except BrokenPipeError:  # it died at once: its log says why, and its job that it ended
        pass
    return follower


class DetachedJob(LocalJob):
    """A run on this machine whose follower this process started: live from the follower's first instant
    (before any rank holds the run's lock) to its last, stopped by stopping the follower. One of several run in
    turn (`turns`) has no follower until its turn: pending until then, skipped if cancelled before."""

    def __init__(self, paths: RunPaths, follower: subprocess.Popen | None, turns: Turns | None = None):
        super().__init__(paths)
        self.follower, self.turns = follower, turns

    def live_state(self) -> RunState | None:
        if self.follower is None:
            return RunState.PENDING if self.turns is not None and self.turns.waiting(self) else None
        return RunState.RUNNING if self.follower.poll() is None else super().live_state()

    def state(self) -> RunState:
        """Running while the follower is: result.json comes a moment before its ranks and the follower end."""
        return self.live_state() or self.ended()

    def follower_killed(self) -> str:
        """How the follower ended where a signal killed it (its ranks died with it), else ''."""
        code = self.follower.poll() if self.follower is not None else None
        if code is None or code >= 0:
            return ""
        return f"its follower (pid {self.follower.pid}) was killed by {signal.Signals(-code).name}, its ranks with it"

    def cancel(self, say=print) -> int:
        """SIGTERM to the follower, which asks its ranks to checkpoint and stop (or is the task, which does);
        waits for it (bounded), then says how the run ended. One waiting its turn is skipped."""
        if self.turns is not None and self.turns.skip(self):
            say(f"{self.name}: {RunState.CANCELLED} before its turn")
            return 0
        if self.follower is None or self.follower.poll() is not None:
            return super().cancel(say)
        request_cancel(self.paths)
        self.follower.send_signal(signal.SIGTERM)
        say(f"stopping {self.name} (SIGTERM to its follower, pid {self.follower.pid})")
        try:
            self.follower.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.follower.kill()  # its ranks die with it
            self.follower.wait(timeout=KILL_WAIT_S)
            say(f"{self.name} did not stop within {STOP_WAIT_S} s; killed its follower, and its ranks with it")
            return 1
        state = self.state()
        hint = resume_hint(self.paths) if state is not RunState.FINISHED else ""
        say(f"{self.name}: {state}" + (f"; {hint}" if hint else ""))
        return 0


class Turns:
    """Several prepared runs on this machine one after another, as `--sweep ... --local` runs them: each run's
    follower is started once the one before has ended, by a thread of this process (the caller's), which ends with
    it. A run interrupted by a signal (its follower killed, or stopped with its caller) stops the rest, as the CLI's
    sweep stops; a cancelled run does not (the next one starts), and one cancelled before its turn is skipped."""

    def __init__(self, backend, runs: list, paths: list[RunPaths]):
        self.backend, self.runs, self.lock, self.over = backend, runs, threading.Lock(), False
        self.jobs = [DetachedJob(p, None, self) for p in paths]
        self.jobs[0].follower = _follower(backend, runs[0], paths[0])  # started before submit returns, as one run's
        threading.Thread(target=self._in_turn, name="dali-launch-turns", daemon=True).start()

    def waiting(self, job: DetachedJob) -> bool:
        """`job` has no follower yet, and will get one: not cancelled, and no earlier run stopped the rest."""
        return not self.over and not cancel_requested(job.paths)

    def skip(self, job: DetachedJob) -> bool:
        """Cancels `job` if its turn has not come (it never starts then); False once its follower is started."""
        with self.lock:
            if job.follower is not None:
                return False
            request_cancel(job.paths)
            return True

    def _in_turn(self) -> None:
        try:
            for run, job in zip(self.runs, self.jobs):
                with self.lock:
                    if job.follower is None and cancel_requested(job.paths):
                        continue
                    job.follower = job.follower or _follower(self.backend, run, job.paths)
                while job.follower.poll() is None:  # bounded by the run itself: its follower stops with its caller
                    time.sleep(CALLER_POLL_S)
                code = job.follower.returncode
                if (code < 0 or code >= 128) and not cancel_requested(job.paths):
                    break
        finally:
            self.over = True


def main() -> None:
    """The follower: stops with its caller (SIGTERM: a polite stop), runs the backend, exits as the CLI would."""
    caller = int(sys.argv[1])
    if os.getppid() != caller:  # the caller died before this line: nothing to run for
        os._exit(EXIT_FAILED)
    threading.Thread(target=_stop_after, args=(caller,), name="dali-launch-caller", daemon=True).start()
    backend, run, root = pickle.load(sys.stdin.buffer)
    leave(_run(backend, run, RunPaths(root)))


def _stop_after(caller: int) -> None:
    """One SIGTERM to this process once `caller` is gone (this process reparented)."""
    while os.getppid() == caller:
        time.sleep(CALLER_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _run(backend, run, paths: RunPaths) -> int:
    """The backend's run to its end and what the CLI's launcher would say of it; the exit code. A failure of the
    task itself (`train`: in this process) ends as it would in any program, its traceback in the log."""
    try:
        outcome = backend.run(run, paths)
    except UsageError as e:
        print(f"dali-launch: error: {e}", file=sys.stderr, flush=True)
        return 2
    except SystemExit as e:  # sys.exit("message") from a task run in this process
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr, flush=True)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if outcome.message:
        print(outcome.message, file=sys.stderr if outcome.code else sys.stdout, flush=True)
    return outcome.code


if __name__ == "__main__":
    main()
