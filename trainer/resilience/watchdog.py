"""The step watchdog: a rank that stops (SIGSTOP, a hang, a dead host) or fails stops the whole job.

JAX's heartbeat does not notice a stopped process quickly, and the other ranks would sit in a
collective waiting for it. Every process touches its heartbeat file every few seconds from a
thread, and per interval reads O(1) files, whatever the job's size:
- the job's cause (ending.py): the first rank that failed or gave up on a peer claimed it, so one
  open tells every rank that the job must end;
- the heartbeat of one peer, the next rank in a ring that has not ended (rank r watches r+1, and
  so on past ranks that ended `done` or `stopped`, which are quiet by design). A peer whose heartbeat
  is older than `watchdog_s` (or missing that long) with no ending is stuck: its watcher records
  the verdict, which becomes the job's cause, says which rank it is, cancels (or requeues) the SLURM
  job, and exits; every other rank sees the cause within one interval and exits too.
Every stuck rank has a live watcher unless all are stuck: the nearest live rank before it in the
ring. Detection takes `watchdog_s` plus at most two intervals, as when every rank watched all (the
old way: N-1 heartbeats and N endings per rank per interval, O(N^2) file operations per interval
on a shared file system).

The ring runs from each task's start, before jax.distributed.initialize, not after it: a rank stopped
(or hung) in its start-up held a job for all of --init-timeout-s (123 s seen), named by no one, though
it had gone quiet. Each rank's heartbeat says who it is, where, and which start of the job it belongs to
(`announce`, a local rank's from its first lines: __main__.py); a watcher reads that once per peer, so an
earlier start's heartbeat or ending is no evidence. A peer that has not announced itself yet may still be
importing: it has --init-timeout-s to do so; one that did and then went quiet has `watchdog_s`, as later.
Until its own rank has met the others at the coordinator, a watcher does not read the job's cause, which
may be an earlier start's until process 0 clears it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from dali_launch.trainer.config import ResilienceConfig
from dali_launch.trainer.resilience import ending, scheduler
from dali_launch.trainer.run_dir import RunPaths, write_atomic
from dali_launch.trainer.topology import Topology

BEAT_S = 2.0
# --watchdog-s's default (config.py), 20: a stopped rank is named within 20 + 2 beats = 24 s, under the
# 30 s a job may sit on one (60 took 59.4 s). Few false alarms: the heartbeat is this thread's, not a
# step's (long steps, compiles, evaluation and checkpoints go on beside it), so 20 s is 10 beats missed
# in a row, which only a process that cannot run Python that long misses (stopped, swapping, a call
# holding the GIL, a touch() stuck on a shared file system); NFS's attribute cache ages a file that
# changes every 2 s by about acregmin (3 s). Large models on busy shared file systems raise it
# (docs/scale.md: 120).


def announce(paths: RunPaths, rank: int, host: str, start: str) -> None:
    """This rank is alive: its heartbeat, which says where it runs and in which start of the job; touched
    from then on (Watchdog)."""
    said = {"rank": rank, "host": host, "pid": os.getpid(), "start": start, "at": time.time()}
    write_atomic(paths.heartbeat(rank), json.dumps(said))


class Watchdog:
    def __init__(self, paths: RunPaths, topology: Topology, config: ResilienceConfig, start="", startup_s=None):
        """`start`: this start of the job (rendezvous.this_start); `startup_s`: how long a peer may take to
        announce itself (--init-timeout-s; `watchdog_s` if None)."""
        self.paths, self.topology, self.config = paths, topology, config
        self.me, self.n = topology.process_id, topology.num_processes
        self.this_start, self.startup_s = start, config.watchdog_s if startup_s is None else startup_s
        self.watched = self._after(self.me)  # the peer whose heartbeat this rank reads; None: none left
        self.known: dict[int, dict] = {}  # peers whose heartbeat of this start was read: what it said
        self.met = False  # this rank met the others at the coordinator: the job's cause is this start's
        announce(paths, self.me, topology.host, start)
        self.started = time.time()  # a peer's missing heartbeat counts from here
        self._stop = threading.Event()

    def start(self) -> None:
        """From the task's start: the heartbeat, and the watched peer's (the thread stops with the process)."""
        threading.Thread(target=self._run, name="dali-launch-watchdog", daemon=True).start()

    def meet(self) -> None:
        """After jax.distributed.initialize: every rank is this start's, and so is the job's cause from now."""
        self.met = True

    def stop(self) -> None:
        """This rank is ending; its ending (done, failed, stopped) tells its peers why it goes quiet."""
        self._stop.set()

    def _beat(self) -> None:
        self.paths.heartbeat(self.me).touch()

    def _run(self) -> None:
        while not self._stop.wait(self._next_look()):
            self._beat()
            found = self._peer_problem()
            if found is not None and not self._stop.is_set():
                self._act(*found)

    def _next_look(self) -> float:
        """A beat, or less where a peer not yet heard of runs out of its start-up time sooner: its verdict then
        comes before process 0's own wait at the coordinator ends (topology.initialize, started later), which
        could name no one."""
        if self.met or self.watched is None or self.watched in self.known:
            return BEAT_S
        return min(BEAT_S, max(0.05, self.started + self.startup_s + 0.05 - time.time()))

    def _after(self, rank: int) -> int | None:
        """The next rank in the ring after `rank`, other than this one; None when that is this one."""
        following = (rank + 1) % self.n
        return None if following == self.me else following

    def _peer_problem(self) -> tuple[int, str, bool] | None:
        """(rank, what happened, stale?) when the job must end, else None: the job's cause, else the
        watched peer's silence."""
        cause = ending.cause(self.paths) if self.met else None
        if cause is not None and cause["rank"] != self.me:
            return cause.get("culprit", cause["rank"]), cause["line"], False
        return self._watched_problem()

    def _watched_problem(self) -> tuple[int, str, bool] | None:
        """The watched peer's heartbeat; once it is stale, its ending says whether to move on."""
        now = time.time()
        while self.watched is not None:
            rank = self.watched
            age, said = self._heartbeat(rank, now)
            if age <= (self.config.watchdog_s if said or self.met else self.startup_s):
                return None
            ended = (
                ending.of(self.paths, rank) if said else None
            )  # an ending before its heartbeat is an earlier start's
            if ended is None or ended["at"] < said["at"]:
                return rank, self._silence(rank, age, said), True
            if ended["how"] in ending.CAUSES:  # its cause is claimed too; this is the rare race before it
                return rank, ended["line"], False
            self.watched = self._after(rank)  # done or stopped: watch the one after it
        return None

    def _heartbeat(self, rank: int, now: float) -> tuple[float, dict | None]:
        """How old `rank`'s heartbeat is, and what it said, if it is this start's; a missing one, or an
        earlier start's, is as old as this watchdog. Its text is read once (then only its time)."""
        try:
            age = now - self.paths.heartbeat(rank).stat().st_mtime
        except FileNotFoundError:
            return now - self.started, None
        if rank not in self.known:
            try:
                said = json.loads(self.paths.heartbeat(rank).read_text())
            except (OSError, ValueError):
                said = None
            if not isinstance(said, dict) or said.get("start") != self.this_start:
                return now - self.started, None
            self.known[rank] = said
        return age, self.known[rank]

    def _silence(self, rank: int, age: float, said: dict | None) -> str:
        """The verdict on a quiet peer, where it runs, and how far it got."""
        if said is None:
            return (
                f"rank {rank} never started: no heartbeat from it in {age:.0f} s (--init-timeout-s "
                f"{self.startup_s}); see its log"
            )
        where = f"pid {said['pid']} on {said['host']}"
        before = "" if self.met else ", before every rank reached the coordinator"
        return (
            f"rank {rank} ({where}) made no progress for {age:.0f} s (stopped, hung or dead; "
            f"--watchdog-s {self.config.watchdog_s}){before}"
        )

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
        if job and stale and requeue:
            scheduler.requeue(self.topology, self.paths, f"the watchdog: {what}")
        elif job and stale:  # a failed rank's exit already ends the step (srun --kill-on-bad-exit)
            scheduler.cancel(self.topology)
        os._exit(ending.EXIT_WATCHDOG)
