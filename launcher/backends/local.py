"""Local mode: the job's processes on this machine, with a localhost coordinator.

Each rank's output goes to its own log (appended to when a run is resumed) and, prefixed, to one
merged console view. How the job ends:
- a rank fails (it raises, dies, or its watchdog gives up on a peer): every rank is killed at once,
  and the report names first the rank whose failure came first (trainer/resilience/ending.py records them);
- Ctrl-C, SIGTERM, SIGUSR2 or SIGHUP to the launcher: the ranks are asked to checkpoint and stop
  (SIGTERM, trainer/resilience/preemption.py) and killed after STOP_GRACE_S; a second signal kills at once;
- `dali-launch cancel RUN` (another process) records the cancel in the run directory, then SIGTERMs the
  ranks: they checkpoint and stop as above, and the run ends `cancelled`, exit 0;
- the launcher itself dies, even by SIGKILL: the kernel kills the ranks (PR_SET_PDEATHSIG, set by
  each rank at its start), so nothing outlives us.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from dali_launch.launcher.backends.base import Backend, Outcome, refuse_node_range
from dali_launch.launcher.backends.job import RunState, cancel_requested
from dali_launch.launcher.console import RankLines, echo
from dali_launch.launcher.route.machine_checks import check_gpus
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.observe import library_output
from dali_launch.trainer.resilience import ending, saved
from dali_launch.trainer.run_dir import RunPaths, hold_lock
from dali_launch.trainer.topology import LAUNCHED_AT, LAUNCHER_PID, LOCAL_ENV

# A stop request is honoured at the next sync point (at most --sync-every-steps steps away on
# CPU, every 256 on GPUs) plus one checkpoint; one that comes during start-up waits for the first
# step to compile. SLURM gives 30 s (KillWait); we allow a slow start-up too.
STOP_GRACE_S = 60
DRAIN_S = 5  # how long the pumps get to copy what dead ranks wrote last
DEATH_LINES = 20  # of a rank's log, kept in the ending of a rank that died without a word
POLL_S = 0.1
# What stops the job politely; any other fatal signal ends the launcher, and with it the ranks.
LIBRARY = library_output.MARK.encode()  # a rank's line its libraries' threads wrote
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2, signal.SIGHUP)
# A rank killed by a signal records nothing; the time we reap it is only an upper bound on its death, and
# its peers' collectives fail within milliseconds of it ("Connection reset by peer"), often recorded
# before our reaper thread wakes (4 processes on 2 cores, measured). Its death counts this much earlier.
REAP_SLACK_S = 1.0


def died_at(reaped_at: float, endings: list[dict]) -> float:
    """When a rank that died without a word counts as dead: REAP_SLACK_S before we reaped it (before the
    peers its death took down), unless a peer had by then said what went wrong in a line of ours (an
    `explained` failure: a refused checkpoint write, say): a death after that is its consequence -- a peer
    aborting once process 0, which hosts the coordination service, left -- and was named first."""
    if any(e.get("explained") and e["at"] <= reaped_at for e in endings):
        return reaped_at
    return reaped_at - REAP_SLACK_S


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(run: RunConfig, rank: int, coordinator: str) -> dict[str, str]:
    return {
        LOCAL_ENV["process_id"]: str(rank),
        LOCAL_ENV["num_processes"]: str(run.num_processes),
        LOCAL_ENV["local_rank"]: str(rank % run.tasks_per_node),
        LOCAL_ENV["coordinator_address"]: coordinator,
    }


def command(paths: RunPaths) -> list[str]:
    return [sys.executable, "-m", "dali_launch.trainer", str(paths.root)]


class Local(Backend):
    """--local: the job's processes here, watched until they end."""

    name = spec_name = "local"
    started_by = "dali-launch --local"

    def check(self, run: RunConfig) -> None:
        refuse_node_range(run, "--local")
        check_gpus(run)

    def run(self, run: RunConfig, paths: RunPaths) -> Outcome:
        ranks = LocalRanks(run, paths, echo=echo)
        ranks.start()
        return ranks.wait(run.launch.local_timeout_s)


class LocalRanks:
    """The rank processes of one local run: started, their output pumped, watched until they end."""

    def __init__(self, run: RunConfig, paths: RunPaths, echo=print):
        self.run, self.paths, self.echo = run, paths, echo
        self.procs: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []
        self.exited: dict[int, tuple[int, float]] = {}  # rank -> (exit code, time.time() it ended)
        self.killed: set[int] = set()  # ranks we killed
        self.signals: list[int] = []  # stop signals received, in order
        self.timed_out, self.timeout_s = False, 0.0  # --local-timeout-s passed: the ranks were asked to stop
        self.lock = threading.Lock()
        self.run_lock = None
        self.started = 0.0

    def start(self) -> None:
        self.run_lock = hold_lock(self.paths.lock("launcher"))  # released when we exit, however we exit
        if self.run_lock is None:
            raise UsageError(f"another dali-launch runs a job in {self.paths.root}; wait for it to end, or stop it")
        coordinator = f"127.0.0.1:{free_port()}"
        self.started = time.time()
        launched = {LAUNCHED_AT: repr(self.started), LAUNCHER_PID: str(os.getpid()), "PYTHONUNBUFFERED": "1"}
        for rank in range(self.run.num_processes):
            env = {**os.environ, **rank_env(self.run, rank, coordinator), **launched}
            # Own session: Ctrl-C reaches us alone, and we decide what it means for the ranks.
            self.procs.append(
                subprocess.Popen(
                    command(self.paths),
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        for rank, proc in enumerate(self.procs):
            for target in (self._pump, self._reap):
                thread = threading.Thread(target=target, args=(rank, proc), daemon=True)
                thread.start()
                self.threads.append(thread)

    def _pump(self, rank: int, proc: subprocess.Popen) -> None:
        """Copies the rank's output to its log, completely, and to the console while it listens."""
        log_path, console = self.paths.log(rank), RankLines()
        resumed = log_path.exists() and log_path.stat().st_size > 0
        with log_path.open("ab") as log:
            if resumed:
                log.write(f"--- resumed {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode())
            for line in proc.stdout:
                try:
                    log.write(line.replace(LIBRARY, b""))  # every line, a library's tagged one too (library_output.py)
                    log.flush()
                except OSError:  # a full disk: the rank's own error says so; its output must still drain
                    pass
                for part in console.console(line.decode(errors="replace").rstrip("\r\n")):
                    if not self._reacting(rank):
                        self._say(f"[rank {rank}] {part.rstrip()}")

    def _reacting(self, rank: int) -> bool:
        """Another rank ended the job in a line of ours (a refused checkpoint write, say): what this one
        prints now is its reaction -- JAX's coordination service gone with process 0, a C++ abort's stack
        -- and stays in its log (one small file read a line: ranks print a few lines an epoch)."""
        explainer = ending.explained_by(self.paths, since=self.started)
        return explainer is not None and explainer != rank

    def _say(self, text: str) -> None:
        with self.lock, contextlib.suppress(OSError):  # a closed console is no failure of the job
            self.echo(text)

    def _reap(self, rank: int, proc: subprocess.Popen) -> None:
        """When each rank ended, to the millisecond: the first to die is the likeliest cause."""
        code = proc.wait()
        self.exited[rank] = (code, time.time())

    def wait(self, timeout_s: float) -> Outcome:
        """Until every rank ended. At --local-timeout-s the ranks are asked to checkpoint and stop, as
        after Ctrl-C, so the time limit loses nothing and the run resumes."""
        self.timeout_s = timeout_s
        deadline, stop_by = time.monotonic() + timeout_s, None
        with self._stop_signals():
            while len(self.exited) < len(self.procs):
                self.timed_out = self.timed_out or time.monotonic() > deadline
                # `dali-launch cancel` records itself before it signals the ranks: their stop is no failure
                stopping = bool(self.signals) or self.timed_out or self._cancelled()
                if not stopping and self._failed():
                    self._kill()
                    break
                if stopping and stop_by is None:
                    if self.signals or self.timed_out:  # a cancel signalled the ranks itself: not twice
                        self._ask_to_stop()
                    stop_by = time.monotonic() + STOP_GRACE_S
                if len(self.signals) > 1 or (stop_by and time.monotonic() > stop_by):
                    self._kill()
                    break
                time.sleep(POLL_S)
        self._drain()
        outcome = self._outcome()
        if outcome.state is RunState.FAILED and len(self.exited) == len(self.procs):
            saved.drop_unfinished(self.paths)  # its writers gone: what a refused write's peers added after
        return outcome

    @contextlib.contextmanager
    def _stop_signals(self):
        """While we wait, the stop signals only note themselves; the wait loop acts on them."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, lambda signum, frame: self.signals.append(signum)) for s in STOP_SIGNALS}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _ask_to_stop(self) -> None:
        """SIGTERM means "checkpoint and stop" to a rank (trainer/resilience/preemption.py)."""
        why = signal.Signals(self.signals[0]).name if self.signals else f"--local-timeout-s {self.timeout_s:g} passed"
        kill = "again to kill them now" if self.signals else "Ctrl-C twice kills them now"
        print(
            f"dali-launch: {why}: asking every rank to checkpoint and stop (within {STOP_GRACE_S} s; {kill})",
            file=sys.stderr,
            flush=True,
        )
        for rank, p in enumerate(self.procs):
            if rank not in self.exited:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)

    def _kill(self) -> None:
        """SIGKILL every live rank and what it started: a failed job has nothing left to save."""
        for rank, p in enumerate(self.procs):
            if rank not in self.exited:
                self.killed.add(rank)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
        end = time.monotonic() + DRAIN_S
        while len(self.exited) < len(self.procs) and time.monotonic() < end:
            time.sleep(POLL_S)

    def _cancelled(self) -> bool:
        return cancel_requested(self.paths, since=self.started)

    def _drain(self) -> None:
        for t in self.threads:
            t.join(timeout=DRAIN_S)

    def _failed(self) -> bool:
        """A rank exited badly, or the job's cause (a failure or a verdict) was recorded DRAIN_S ago and
        its rank is still there (it leaves at once once its traceback is printed; killing it sooner would
        cut that short). One file per poll, whatever the job's size: every ending is read only at the end."""
        if any(code != 0 for code, _ in self.exited.values()):
            return True
        cause = ending.cause(self.paths, since=self.started)
        return cause is not None and time.time() - cause["at"] > DRAIN_S

    def _causes(self) -> list[tuple[float, int, str, bool]]:
        """(when, culprit rank, what, explained: our own one-line error) of everything that ends the job,
        earliest first: failures the ranks recorded, watchdog verdicts, and deaths nobody explained (a
        signal, an abort)."""
        endings = ending.read(self.paths, since=self.started)
        found = [
            (e["at"], e.get("culprit", e["rank"]), e["line"], e.get("explained", False))
            for e in endings
            if e["how"] in ending.CAUSES
        ]
        for rank, (code, at) in self._unexplained_deaths(endings):
            found.append((died_at(at, endings), rank, f"rank {rank} {_how(code)}", False))
        return sorted(found)

    def _outcome(self) -> Outcome:
        codes = {rank: code for rank, (code, _) in self.exited.items()}
        if len(codes) == len(self.procs) and not any(codes.values()):
            return Outcome(RunState.FINISHED, "all ranks finished", 0)
        if self.signals or self.timed_out or self._cancelled():
            return self._stopped()
        self._record_deaths()
        causes = self._causes() or [(0.0, min(r for r, c in codes.items() if c), "a rank failed", False)]
        _, culprit, what, explained = causes[0]
        if explained:  # our own one-line error: it says what happened and the fix; the rest is in the logs
            return Outcome(RunState.FAILED, what, 1)
        ends = ", ".join(
            f"rank {r} {'was killed by the launcher' if r in self.killed else _how(c)}"
            for r, c in sorted(codes.items())
        )
        log = self.paths.log(culprit).read_text(errors="replace") if self.paths.log(culprit).exists() else ""
        return Outcome(RunState.FAILED, f"{what}\nhow each rank ended: {ends}\n{traceback_of(log)}", 1)

    def _unexplained_deaths(self, endings: list[dict]) -> list[tuple[int, tuple[int, float]]]:
        """Ranks that exited badly without an ending, other than those we killed and those whose watchdog
        left on the job's cause (EXIT_WATCHDOG): such a rank reacts, and its exit, often within a second of
        the cause, would otherwise count REAP_SLACK_S early and be named before the rank that failed."""
        explained = {e["rank"] for e in endings}
        return [
            (rank, (code, at))
            for rank, (code, at) in self.exited.items()
            if code not in (0, ending.EXIT_WATCHDOG) and rank not in explained and rank not in self.killed
        ]

    def _record_deaths(self) -> None:
        """A rank that died without a word (SIGKILL: the OOM killer, say) gets its ending from us: how it
        died and the last lines of its log, where `status` and its peers look."""
        endings = ending.read(self.paths, since=self.started)
        for rank, (code, at) in self._unexplained_deaths(endings):
            log = self.paths.log(rank)
            tail = log.read_text(errors="replace").splitlines()[-DEATH_LINES:] if log.exists() else []
            died = died_at(at, endings)
            ending.record(self.paths, rank, ending.FAILED, f"rank {rank} {_how(code)}", at=died, last_lines=tail)

    def _stopped(self) -> Outcome:
        """After a stop signal or a cancel: the step the ranks checkpointed at, and how to go on from it.
        A cancel is what was asked for (exit 0); a signal ends the launcher as it would any program."""
        if self.signals:
            name = signal.Signals(self.signals[0]).name
            state, head, code = RunState.INTERRUPTED, f"interrupted ({name})", 128 + self.signals[0]
        elif self.timed_out:
            state, code = RunState.INTERRUPTED, 1
            head = f"the job did not finish within --local-timeout-s {self.timeout_s:g}"
        else:
            state, head, code = RunState.CANCELLED, "cancelled (`dali-launch cancel`)", 0
        resume = TaskSpec.load(self.paths.root).how_to_resume()
        if self.timed_out:
            resume += " (give it a larger --local-timeout-s to finish)"
        stopped = [e for e in ending.read(self.paths, since=self.started) if e["how"] == ending.STOPPED]
        if len(stopped) == len(self.procs):
            return Outcome(
                state, f"{head}; checkpoint written at step {stopped[0]['step']}; resume with {resume}", code
            )
        self._record_kills()
        newest = saved.newest(self.paths)
        then = (
            f"the newest checkpoint is step {newest.step}; resume with {resume}"
            if newest is not None
            else "no checkpoint was written; start the run again"
        )
        return Outcome(state, f"{head}; killed the ranks before they checkpointed; {then}", code)

    def _record_kills(self) -> None:
        """Ranks we killed while they were stopping (a second signal, or the grace gone) end `stopped` too,
        without a checkpoint: the run was interrupted as asked, which `status` must say, not "failed"."""
        if len(self.signals) > 1:
            how = f"a second {signal.Signals(self.signals[1]).name}"
        else:
            asked = (
                signal.Signals(self.signals[0]).name
                if self.signals
                else f"--local-timeout-s {self.timeout_s:g}"
                if self.timed_out
                else "`dali-launch cancel`"
            )
            how = f"the launcher {STOP_GRACE_S} s after {asked}"
        ended = {e["rank"] for e in ending.read(self.paths, since=self.started)}
        for rank in sorted(self.killed - ended):
            ending.record(self.paths, rank, ending.STOPPED, f"rank {rank} was killed by {how}, before it checkpointed")


def _how(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def traceback_of(log: str, tail_lines: int = 30) -> str:
    """The last Python traceback in a log, else its tail."""
    lines = log.rstrip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    return "\n".join(lines[starts[-1] :] if starts else lines[-tail_lines:])
