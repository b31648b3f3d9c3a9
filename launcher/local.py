"""Local mode: the job's processes on this machine, with a localhost coordinator.

Each rank's output goes to its own log and, prefixed, to one merged console view. The first rank
that fails takes the others down; so does Ctrl-C; so does the overall timeout. Nothing outlives us.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from dali_launch.launcher.config import RunConfig
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import LAUNCHED_AT, LOCAL_ENV

GRACE_S = 5  # SIGTERM, then SIGKILL after this long


@dataclass
class Outcome:
    ok: bool
    message: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(run: RunConfig, rank: int, coordinator: str) -> dict[str, str]:
    return {LOCAL_ENV["process_id"]: str(rank), LOCAL_ENV["num_processes"]: str(run.num_processes),
            LOCAL_ENV["local_rank"]: str(rank % run.tasks_per_node), LOCAL_ENV["coordinator_address"]: coordinator}


def command(paths: RunPaths) -> list[str]:
    return [sys.executable, "-m", "dali_launch.trainer", str(paths.root)]


class LocalJob:
    def __init__(self, run: RunConfig, paths: RunPaths, echo=print):
        self.run, self.paths, self.echo = run, paths, echo
        self.procs: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        coordinator = f"127.0.0.1:{free_port()}"
        launched = {LAUNCHED_AT: repr(time.time()), "PYTHONUNBUFFERED": "1"}
        for rank in range(self.run.num_processes):
            env = {**os.environ, **rank_env(self.run, rank, coordinator), **launched}
            # Own session: Ctrl-C reaches us alone, and we stop the ranks in order.
            proc = subprocess.Popen(command(self.paths), env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            self.procs.append(proc)
            thread = threading.Thread(target=self._pump, args=(rank, proc), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _pump(self, rank: int, proc: subprocess.Popen) -> None:
        with self.paths.log(rank).open("wb") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                with self.lock:
                    self.echo(f"[rank {rank}] {line.decode(errors='replace').rstrip()}")

    def wait(self, timeout_s: float) -> Outcome:
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                codes = [p.poll() for p in self.procs]
                failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    rank, code = failed[0]
                    self.stop()
                    return Outcome(False, self._failure(rank, code))
                if all(c == 0 for c in codes):
                    self._drain()
                    return Outcome(True, "all ranks finished")
                time.sleep(0.2)
            self.stop()
            return Outcome(False, f"the job did not finish within --local-timeout-s {timeout_s:g}; stopped every rank")
        except KeyboardInterrupt:
            self.stop()
            return Outcome(False, "interrupted; stopped every rank")

    def _failure(self, rank: int, code: int) -> str:
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        self._drain()
        return f"rank {rank} {how}\n{traceback_of(self.paths.log(rank).read_text(errors='replace'))}"

    def stop(self) -> None:
        """SIGTERM every live rank's process group, SIGKILL what is left after GRACE_S."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self.procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
            end = time.monotonic() + GRACE_S
            while time.monotonic() < end and any(p.poll() is None for p in self.procs):
                time.sleep(0.1)
        self._drain()

    def _drain(self) -> None:
        for t in self.threads:
            t.join(timeout=GRACE_S)


def traceback_of(log: str, tail_lines: int = 30) -> str:
    """The last Python traceback in a log, else its tail."""
    lines = log.rstrip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    return "\n".join(lines[starts[-1]:] if starts else lines[-tail_lines:])
