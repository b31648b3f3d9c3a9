"""Shard arithmetic (trainer/data/shards.py): pure functions, checked against DALI's own splits
elsewhere (test_train.py's exactly-once epochs); here their values, fast."""

from __future__ import annotations

import numpy as np
import pytest

from dali_launch.trainer.data.shards import Sharding, shard_size, steps_per_epoch, valid_mask
from dali_launch.trainer.plan.data import reader_threads, readers_per_device


@pytest.mark.parametrize("n, shards", [(10, 3), (8000, 4), (7, 8), (60000, 16)])
def test_shards_cover_the_data_set_once(n, shards):
    sizes = [shard_size(n, s, shards) for s in range(shards)]
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1


def test_steps_per_epoch_pads_to_the_largest_shard():
    assert steps_per_epoch(10, 3, 2) == 2  # shards of 3, 3, 4: the largest takes 2 batches of 2
    assert steps_per_epoch(8000, 2, 50) == 80
    assert steps_per_epoch(8000, 2, 350) == 12  # 4,000 per shard: 11 whole batches and one padded


def test_sharding_of_a_process():
    """Process 1 of 2, 2 devices each, 2 readers per device: job devices 2 and 3, shards 4..7 of 8."""
    s = Sharding(first_device=2, local_devices=2, global_devices=4, readers=2)
    assert s.device_ids == (2, 3) and s.shard_ids == (4, 5, 6, 7) and s.num_shards == 8
    assert s.shard_sizes(82).tolist() == [[10, 10], [10, 11]]


def test_valid_mask_marks_the_padding():
    """Two readers at position 3 of shards holding 4 and 5 samples, 2 rows each."""
    mask = np.asarray(valid_mask(3, np.array([4, 5]), 2))
    assert mask.tolist() == [1, 0, 1, 1]


@pytest.mark.parametrize(
    "setting, threads, platform, decoder, call_batch, cores, expected",
    [
        (3, 2, "gpu", "cpu", 50, 16, 3),  # given: kept (the launcher checked that it divides)
        (0, 2, "cpu", "cpu", 1200, 16, 1),  # CPU devices: one reader
        (0, 2, "gpu", "cpu", 1200, 16, 8),  # the H200 machine: 8 readers of 2 threads fit 16 cores per GPU
        (0, 4, "gpu", "cpu", 1200, 16, 4),
        (0, 2, "gpu", "cpu", 1200, 8, 4),
        (0, 2, "gpu", "cpu", 1200, 4, 2),
        (0, 2, "gpu", "cpu", 500, 64, 4),  # 8 does not divide 500
        (0, 2, "gpu", "cpu", 50, 16, 2),  # 50: 2 divides it, 8 and 4 do not
        (0, 2, "gpu", "cpu", 1200, 1, 1),
        (0, 8, "gpu", "cpu", 1200, 2, 1),
        (0, 8, "gpu", "mixed", 1280, 16, 1),  # nvJPEG: one pipeline feeds the GPU's decoders
    ],
)
def test_readers_per_device(setting, threads, platform, decoder, call_batch, cores, expected):
    assert readers_per_device(setting, threads, platform, decoder, call_batch, cores) == expected


@pytest.mark.parametrize(
    "setting, decoder, cores, expected",
    [(0, "cpu", 16, 2), (0, "mixed", 16, 8), (0, "mixed", 6, 6), (0, "mixed", 0, 1), (3, "mixed", 16, 3)],
)
def test_reader_threads(setting, decoder, cores, expected):
    assert reader_threads(setting, decoder, cores) == expected


def test_a_batch_too_large_for_the_data_set_is_warned_of():
    """More than 10 % of an epoch's rows padding: one warning line with the fix; none below that."""
    from dali_launch.trainer.data.shards import padding_warning

    assert padding_warning(8000, 1, 100_000, 1, 1) == (
        "warning: 92% of each epoch is padding: 8,000 training samples fill 1 device call of 100,000 samples on "
        "each of 1 device; use a --batch-size of at most 8,000"
    )
    assert padding_warning(210, 4, 32, 2, 1).endswith(
        "use a --batch-size that divides the 105 samples each device reads"
    )
    assert padding_warning(8000, 1, 1200, 8, 24).endswith(
        "use a --batch-size × --steps-per-call (50 × 24) of at most 1,000"
    )
    assert padding_warning(8000, 160, 50, 1, 1) == "" == padding_warning(210, 7, 8, 4, 1)  # 0 % and 6 %
