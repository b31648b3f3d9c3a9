"""The watchdog's per-interval work, on a real run directory: O(1) files per rank whatever the job's
size, the ring of watched peers, the job's one cause (resilience/watchdog.py, resilience/ending.py),
and which rank the local launcher names first (backends/local.py)."""

from __future__ import annotations

import os
import time

from dali_launch.trainer.config import ResilienceConfig
from dali_launch.trainer.resilience import ending
from dali_launch.trainer.resilience.watchdog import Watchdog, announce
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import Topology


def _watchdog(paths: RunPaths, rank: int, n: int, watchdog_s: int = 60) -> Watchdog:
    topology = Topology(rank, n, "127.0.0.1:1", 1, None, "host", "cpu")
    return Watchdog(paths, topology, ResilienceConfig(watchdog_s=watchdog_s))


def _beat(paths: RunPaths, rank: int, age_s: float = 0.0) -> None:
    """`rank`'s heartbeat in this start of the job (the watchdogs' start, ""), last touched `age_s` ago."""
    announce(paths, rank, f"node{rank}", "")
    then = time.time() - age_s
    os.utime(paths.heartbeat(rank), (then, then))


def test_each_rank_reads_its_ring_neighbour_alone(tmp_path, monkeypatch):
    """1,024 ranks, all beating: one interval of rank 5 opens the cause and stats rank 6's heartbeat."""
    paths = RunPaths(tmp_path)
    for rank in range(1024):
        _beat(paths, rank)
    dog = _watchdog(paths, 5, 1024)
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: stats.append(str(p)) or real_stat(p, *a, **k))
    assert dog._peer_problem() is None
    assert [s for s in stats if "heartbeats" in s] == [str(paths.heartbeat(6))]
    assert _watchdog(paths, 1023, 1024).watched == 0 and _watchdog(paths, 0, 1).watched is None


def test_a_stuck_peer_is_named_by_its_watcher_and_ended_ones_are_passed(tmp_path):
    paths = RunPaths(tmp_path)
    dog = _watchdog(paths, 0, 4, watchdog_s=10)
    for rank in range(4):
        _beat(paths, rank, age_s=100 if rank in (1, 2) else 0)
    ending.record(paths, 1, ending.DONE)  # quiet by design: rank 0 moves on to rank 2
    rank, what, stale = dog._peer_problem()
    assert (rank, stale) == (2, True) and what.startswith(
        f"rank 2 (pid {os.getpid()} on node2) made no progress for 100 s"
    ), what
    assert dog.watched == 2


def test_the_first_cause_wins_and_every_rank_sees_it_in_one_file(tmp_path):
    paths = RunPaths(tmp_path)
    for rank in range(3):
        _beat(paths, rank)
    ending.record(paths, 2, ending.FAILED, "rank 2 failed: RuntimeError: boom")
    ending.record(paths, 0, ending.VERDICT, "rank 1 made no progress", culprit=1)  # later: not the cause
    assert ending.cause(paths)["line"] == "rank 2 failed: RuntimeError: boom"
    dog = _watchdog(paths, 1, 3)
    assert dog._peer_problem() is None  # before the coordinator, a cause may be an earlier start's
    dog.meet()
    assert dog._peer_problem() == (2, "rank 2 failed: RuntimeError: boom", False)
    assert ending.cause(paths, since=time.time() + 1) is None  # an earlier run's cause
    assert sorted(p.name for p in paths.endings.iterdir()) == ["cause.json", "rank-0.json", "rank-2.json"]
    ending.clear(paths, 0)  # process 0, before the rendezvous of a resumed run
    assert ending.cause(paths) is None


def test_the_local_launcher_names_a_killed_rank_before_the_peers_it_took_down(tmp_path):
    """Rank 3 is SIGKILLed; rank 2's collective fails on the lost connection and records that 40 ms before
    the launcher reaps rank 3 (as seen with 4 processes on 2 cores): rank 3 comes first."""
    from dali_launch.launcher.backends.local import LocalRanks

    paths = RunPaths(tmp_path)
    ranks = LocalRanks(None, paths)
    ranks.started = time.time() - 10
    ending.record(paths, 2, ending.FAILED, "rank 2 failed: JaxRuntimeError: Gloo ... Connection reset by peer")
    ranks.exited = {3: (-9, time.time() + 0.04)}
    assert [culprit for _, culprit, _, _ in ranks._causes()] == [3, 2]
    assert ranks._causes()[0][2] == "rank 3 was killed by SIGKILL"


def test_the_local_launcher_does_not_name_a_rank_whose_watchdog_left_on_the_cause(tmp_path):
    """Rank 1 raises; rank 0's watchdog sees the cause within a beat and exits (EXIT_WATCHDOG) without an
    ending of its own, reaped 0.3 s after rank 1's failure: counted as an unexplained death it would be
    dated REAP_SLACK_S early and named first (a CI run's "rank 0 exited with code 4")."""
    from dali_launch.launcher.backends.local import LocalRanks

    paths = RunPaths(tmp_path)
    ranks = LocalRanks(None, paths)
    ranks.started = time.time() - 10
    ending.record(paths, 1, ending.FAILED, "rank 1 failed: RuntimeError: rank 1 fails mid-epoch (injected)")
    ranks.exited = {0: (ending.EXIT_WATCHDOG, time.time() + 0.3), 1: (1, time.time() + 0.5)}
    assert [culprit for _, culprit, _, _ in ranks._causes()] == [1]
    ranks._record_deaths()
    assert ending.of(paths, 0) is None


def test_in_the_start_up_an_earlier_starts_heartbeat_and_ending_are_no_evidence(tmp_path):
    """Before the coordinator: rank 1's heartbeat and `done` ending are an earlier start's; it has
    --init-timeout-s to announce itself, then it "never started". Announced and then quiet, it has
    --watchdog-s, and its earlier ending does not excuse it."""
    paths = RunPaths(tmp_path)
    announce(paths, 1, "node1", "earlier")
    ending.record(paths, 1, ending.DONE)
    topology = Topology(0, 2, "127.0.0.1:1", 1, None, "node0", "cpu")
    dog = Watchdog(paths, topology, ResilienceConfig(watchdog_s=10), start="now", startup_s=30)
    assert dog._peer_problem() is None
    dog.started -= 31
    rank, what, stale = dog._peer_problem()
    assert (rank, stale, what) == (
        1,
        True,
        "rank 1 never started: no heartbeat from it in 31 s (--init-timeout-s 30); see its log",
    )
    announce(paths, 1, "node1", "now")
    assert dog._peer_problem() is None
    then = time.time() - 12
    os.utime(paths.heartbeat(1), (then, then))
    rank, what, stale = dog._peer_problem()
    assert what == (
        f"rank 1 (pid {os.getpid()} on node1) made no progress for 12 s (stopped, hung or dead; --watchdog-s 10), "
        "before every rank reached the coordinator"
    )
