"""benchmarks/scale_probe.py: which of a rank's file operations its steps did, on a probe file's records."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from scale_probe import per_rank  # benchmarks/ is a folder of scripts, not a package

RUN = Path("/runs/r")
MARKS = [
    ("phase", 1.3, 1.3, "first step"),
    ("epoch", 1.2, 2.4, {"epoch": 0, "calls": 25}),
    ("evaluate", 2.4, 2.5, None),
    ("epoch", 2.6, 3.9, {"epoch": 1, "calls": 25}),
]


def _beat(at: float, first_look: bool = False) -> list:
    """One interval of rank 0's watchdog: its heartbeat, the job's cause, its peer's heartbeat (read once)."""
    beat = [
        (at, "os.utime", f"{RUN}/heartbeats/rank-0"),
        (at, "open", f"{RUN}/endings/cause.json"),
        (at, "os.stat", f"{RUN}/heartbeats/rank-1"),
    ]
    return beat + ([(at, "open", f"{RUN}/heartbeats/rank-1")] if first_look else [])


def test_the_watchdogs_first_read_of_its_peer_among_the_steps_is_not_a_steps():
    """A warm compile cache has the first step done 1.3 s in, before the watchdog's first look (2 s), which
    reads the peer's heartbeat text: the watchdog's, not the steps'; its periodic rate leaves it out."""
    counts = per_rank({"events": _beat(2.0, first_look=True) + _beat(4.0), "marks": MARKS}, RUN)
    assert counts["step_ops"] == 0 and counts["step_events"] == [], counts
    assert counts["watchdog_ops_per_s"] == 1.5, counts  # 3 operations per 2 s beat


def test_a_file_operation_of_the_steps_is_counted_and_named():
    """What the rank itself does among its steps (here a write of its heartbeat, as `announce` does) counts,
    and the row names it: seconds after the first step, the operation, the path in the run directory."""
    write = (2.0, "open", f"{RUN}/heartbeats/.rank-0.k2x.tmp")
    counts = per_rank({"events": [*_beat(2.0, first_look=True), write, *_beat(4.0)], "marks": MARKS}, RUN)
    assert counts["step_ops"] == 1 / 49, counts  # 24 calls in epoch 0 after its first, 25 in epoch 1
    assert counts["step_events"] == [[0.7, "open", "heartbeats/.rank-0.k2x.tmp"]], counts


def test_process_0s_progress_is_written_beside_the_steps():
    """progress.json, written through a temporary file of its own by a thread of process 0 (at most every 5 s):
    counted with the background's, as a rate, never as the steps'."""
    tmp = f"{RUN}/.progress.json.a1b2c3d4.tmp"
    written = [(2.0, "open", tmp), (2.0, "os.rename", tmp)]
    counts = per_rank({"events": [*_beat(2.0, first_look=True), *written, *_beat(4.0)], "marks": MARKS}, RUN)
    assert counts["step_ops"] == 0 and counts["background_ops_per_s"] > 0, counts


def test_a_ranks_polls_for_the_coordinators_address_are_counted_apart():
    """A rank polls coordinator.json every 0.1 s until process 0 wrote it: 14 reads seen when process 0 came
    1.4 s later (two busy cores), 1 when they came together. Its start-up touches the same files either way."""
    config = (0.1, "open", f"{RUN}/config.json")
    for polls in (1, 14):
        reads = [(0.2 + i / 20, "open", f"{RUN}/coordinator.json") for i in range(polls)]
        counts = per_rank({"events": [config, *reads, *_beat(2.0), *_beat(4.0)], "marks": MARKS}, RUN)
        assert (counts["startup_ops"], counts["startup_polls"]) == (1, polls), counts
