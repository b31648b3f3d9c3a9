"""--record-samples' records, read back by the tests of exactly-once epochs (run_readers.seen_prints)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from dali_launch.trainer.observe.replicas import SampleRecorder
from dali_launch.trainer.run_dir import RunPaths


def test_a_resumed_epoch_forgets_what_a_killed_run_recorded_past_its_checkpoint(tmp_path):
    """Killed (kill -9) after its checkpoint at call 8 of epoch 1, a run of two ranks had saved some records of later
    calls; resumed on one rank, only rank 0's would be written again: the resumed epoch removes them all first."""
    paths = RunPaths(tmp_path)
    paths.samples.mkdir()
    kept = [(0, 0, 0), (0, 1, 8), (1, 0, 0), (1, 1, 0)]  # (epoch, rank, first call): before the checkpoint
    stale = [(1, 0, 8), (1, 1, 8), (2, 1, 0)]
    for epoch, rank, call in kept + stale:
        np.save(paths.sample_record(epoch, rank, call), np.zeros(2, np.uint64))
    SampleRecorder(SimpleNamespace(run_dir=str(tmp_path)), None, 1, 8, 0)  # process 0 of the resumed run
    assert sorted(paths.samples.iterdir()) == sorted(paths.sample_record(*k) for k in kept)
