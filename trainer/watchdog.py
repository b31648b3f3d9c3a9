"""The step watchdog: a rank that stops (SIGSTOP, a hang, a dead host) stops the whole job.

JAX's heartbeat does not notice a stopped process quickly, and the other ranks would sit in a
collective waiting for it. Every process touches its heartbeat file every few seconds from a
thread; every process also watches the others' files, and the first to see one older than
`watchdog_s` says which rank it is, cancels (or requeues) the SLURM job, and exits.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from dali_launch.trainer.config import ResilienceConfig
from dali_launch.trainer.run_dir import RunPaths

BEAT_S = 2.0


class Watchdog:
    def __init__(self, paths: RunPaths, process_id: int, num_processes: int, config: ResilienceConfig):
        self.paths, self.me, self.n, self.config = paths, process_id, num_processes, config
        paths.heartbeats.mkdir(parents=True, exist_ok=True)
        self._beat()
        self._stop = threading.Event()

    def start(self) -> None:
        """Call once every rank is known to be alive (after the rank map barrier)."""
        threading.Thread(target=self._run, name="dali-launch-watchdog", daemon=True).start()

    def stop(self) -> None:
        """This rank is done: its silence from now on is no failure (peers skip missing files)."""
        self._stop.set()
        self.paths.heartbeat(self.me).unlink(missing_ok=True)

    def _beat(self) -> None:
        self.paths.heartbeat(self.me).touch()

    def _run(self) -> None:
        while not self._stop.wait(BEAT_S):
            self._beat()
            stale = self._stale_peer()
            if stale is not None and not self._stop.is_set():
                self._act(*stale)

    def _stale_peer(self) -> tuple[int, float] | None:
        now = time.time()
        for rank in range(self.n):
            try:
                age = now - self.paths.heartbeat(rank).stat().st_mtime
            except FileNotFoundError:
                continue
            if rank != self.me and age > self.config.watchdog_s:
                return rank, age
        return None

    def _act(self, rank: int, age: float) -> None:
        job = os.environ.get("SLURM_JOB_ID")
        requeue = self.config.on_stuck == "requeue" and job and \
            int(os.environ.get("SLURM_RESTART_COUNT", "0")) < self.config.max_requeues
        what = "requeuing the job from its last checkpoint" if requeue else "stopping the job"
        print(f"dali-launch: error: rank {rank} made no progress for {age:.0f} s (stopped, hung or dead; "
              f"--watchdog-s {self.config.watchdog_s}); {what}", file=sys.stderr, flush=True)
        if job:
            command = ["scontrol", "requeue", job] if requeue else ["scancel", job]
            subprocess.run(command, check=False, timeout=60, capture_output=True)
        os._exit(4)
