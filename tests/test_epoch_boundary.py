"""Between two epochs (trainer/epoch_boundary.py): the epoch-end checkpoint written while the next epoch's first
calls run where they outlast it, and that checkpoint the same as one written with the devices waiting."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import check_ok, dali_launch
from flax.traverse_util import flatten_dict
from run_readers import checkpoint_state, only_run

from dali_launch.trainer.epoch_boundary import calls_ahead


@pytest.mark.parametrize(
    "write_s, call_s, ready, calls",
    [
        (None, 0.01, 4, 0),  # no write measured yet: written first
        (0.13, None, 4, 0),  # no epoch timed yet
        (0.13, 0.29, 4, 1),  # segmentation's call on an H200 outlasts the write
        (0.15, 0.086, 4, 2),  # detection's: two calls
        (0.124, 0.018, 4, 0),  # contrastive's: 7 calls, more than DALI holds ready
        (0.124, 0.018, 8, 7),
    ],
)
def test_the_calls_that_hide_the_write_are_the_fewest_that_outlast_it_if_ready(write_s, call_s, ready, calls):
    assert calls_ahead(write_s, call_s, ready) == calls


@pytest.mark.slow
def test_a_checkpoint_written_behind_the_next_epochs_calls_is_the_one_written_before_them(small_lmdb, tmp_path):
    """A deep prefetch queue lets the first calls of epochs 2 and 3 run while their starting checkpoints are
    written (the state's buffers donated meanwhile): epoch 2's starting checkpoint holds, bit for bit, what a
    run of two epochs ends with (its last checkpoint, written with nothing after it), DALI's states with it."""
    common = ["train", "--data-dir", str(small_lmdb), "--prefetch", "64", "--checkpoint-async", "off"]
    check_ok(dali_launch(*common, "--epochs", "3", "--run-root", str(tmp_path / "three")))
    check_ok(dali_launch(*common, "--epochs", "2", "--run-root", str(tmp_path / "two")))
    three, two = only_run(tmp_path / "three"), only_run(tmp_path / "two")
    epochs = [json.loads(line) for line in three.metrics.read_text().splitlines()]
    assert epochs[0]["between_epochs_s"] is None and epochs[1]["between_epochs_s"] > 0
    assert [e["checkpoint_behind_calls"] for e in epochs][:2] == [0, 0]  # the first write is measured, not hidden
    assert epochs[2]["checkpoint_behind_calls"] > 0, epochs[2]
    step = 2 * 16  # 800 samples, 50 a step: 16 calls an epoch on one device
    hidden, plain = (flatten_dict(checkpoint_state(run, step), sep="/") for run in (three, two))
    assert hidden.keys() == plain.keys()
    for name, value in hidden.items():
        np.testing.assert_array_equal(value, plain[name], err_msg=name)
    meta = lambda paths: json.loads((paths.checkpoints / str(step) / "meta" / "metadata").read_text())
    assert meta(three)["dali"] == meta(two)["dali"] and meta(three)["epoch"] == 2
