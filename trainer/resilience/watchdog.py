"""The step watchdog: a rank that stops (SIGSTOP, a hang, a dead host) or fails stops the whole job.

JAX's heartbeat does not notice a stopped process quickly, and the other ranks would sit in a
collective waiting for it. Every process touches its heartbeat file every few seconds from a
thread, and watches its peers: a peer whose heartbeat is older than `watchdog_s` (or missing that
long) while it has no ending, or whose ending says it failed, ends the job: the first rank to see it
records its verdict, says which rank it is, cancels (or requeues) the SLURM job, and exits.
A peer that ended `done` or `stopped` is quiet by design.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from dali_launch.trainer.config import ResilienceConfig
from dali_launch.trainer.resilience import ending, scheduler
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import Topology

BEAT_S = 2.0
EXIT_WATCHDOG = 4


class Watchdog:
    def __init__(self, paths: RunPaths, topology: Topology, config: ResilienceConfig):
        self.paths, self.topology, self.config = paths, topology, config
        self.me, self.n = topology.process_id, topology.num_processes
        paths.heartbeats.mkdir(parents=True, exist_ok=True)
        self._beat()
        self.started = time.time()  # a peer's missing heartbeat counts from here
        self._stop = threading.Event()

    def start(self) -> None:
        """Call once every rank is known to be alive (after jax.distributed.initialize)."""
        threading.Thread(target=self._run, name="dali-launch-watchdog", daemon=True).start()

    def stop(self) -> None:
        """This rank is ending; its ending (done, failed, stopped) tells its peers why it goes quiet."""
        self._stop.set()

    def _beat(self) -> None:
        self.paths.heartbeat(self.me).touch()

    def _run(self) -> None:
        while not self._stop.wait(BEAT_S):
            self._beat()
            found = self._peer_problem()
            if found is not None and not self._stop.is_set():
                self._act(*found)

    def _peer_problem(self) -> tuple[int, str, bool] | None:
        """(rank, what happened, stale?) for the first peer that ends the job, else None."""
        endings = {e["rank"]: e for e in ending.read(self.paths)}
        now = time.time()
        for rank in (r for r in range(self.n) if r != self.me):
            if rank in endings:
                if endings[rank]["how"] in ending.CAUSES:
                    return rank, endings[rank]["line"], False
                continue
            try:
                age = now - self.paths.heartbeat(rank).stat().st_mtime
            except FileNotFoundError:
                age = now - self.started
            if age > self.config.watchdog_s:
                return (
                    rank,
                    (
                        f"rank {rank} made no progress for {age:.0f} s (stopped, hung or dead; "
                        f"--watchdog-s {self.config.watchdog_s})"
                    ),
                    True,
                )
        return None

    def _act(self, rank: int, what: str, stale: bool) -> None:
        job = self.topology.job_id
        requeue = (
            stale
            and self.config.on_stuck == "requeue"
            and scheduler.may_requeue(self.topology, self.config.max_requeues)
        )
        if stale:  # a failed peer recorded its own ending; a stuck one cannot
            ending.record(self.paths, self.me, ending.VERDICT, what, culprit=rank)
        how = "requeuing the job from its last checkpoint" if requeue else "stopping the job"
        print(f"dali-launch: error: {what}; {how}", file=sys.stderr, flush=True)
        if job and stale:  # a failed rank's exit already ends the step (srun --kill-on-bad-exit)
            (scheduler.requeue if requeue else scheduler.cancel)(self.topology)
        os._exit(EXIT_WATCHDOG)
