"""The rest of a shard-order epoch on another topology (trainer/data/hosting.py), as arithmetic: where each
old pipeline goes, and which rows make each step. The runs that read it are in test_elastic.py."""

from __future__ import annotations

import numpy as np
import pytest

from dali_launch.trainer.data.hosting import Remainder, ShardLayout


def _old_steps(old: ShardLayout) -> list[list[set]]:
    """Old step j of old device d, as the set of (d, reader, row) it holds (parallel.sample_order: device
    row q is reader q % R's row q // R; step j is rows [j*b, (j+1)*b) of them)."""
    return [
        [
            {(d, q % old.readers, q // old.readers) for q in range(j * old.batch, (j + 1) * old.batch)}
            for d in range(old.devices)
        ]
        for j in range(old.steps)
    ]


def _new_steps(rest: Remainder) -> list[list]:
    """Each new device's rows of one call, as (old device, reader, row) or None (padding), cut into steps."""
    old, order = rest.reading, rest.row_order()
    steps = []
    for device in range(rest.devices):
        given = [  # what its pipelines give: slot after slot, each its readers' rows end to end
            (d, r, i) if d is not None else None
            for d in rest.hosted(device)
            for r in range(old.readers)
            for i in range(old.reader_batch)
        ]
        rows = [given[k] for k in order]
        steps.append([rows[s : s + rest.batch_per_step] for s in range(0, len(rows), rest.batch_per_step)])
    return steps


LAYOUTS = [(2, 1, 60, 1, 1), (4, 2, 6, 3, 3), (3, 1, 4, 2, 2), (2, 4, 8, 2, 3), (1, 2, 4, 2, 3), (5, 1, 3, 1, 2)]


@pytest.mark.parametrize("devices, readers, batch, steps, new", LAYOUTS)
def test_keep_makes_each_old_step_one_step_on_the_new_devices(devices, readers, batch, steps, new):
    old = ShardLayout(devices, readers, batch, steps)
    rest = Remainder(old, new, "keep", calls_done=1)
    assert (rest.batch_per_step, rest.steps_per_call) == (rest.slots * batch, steps)
    made = _new_steps(rest)
    for j, wanted in enumerate(_old_steps(old)):
        step = [row for device in made for row in device[j] if row is not None]
        assert len(step) == len(set(step)) and set(step) == set().union(*wanted), j


@pytest.mark.parametrize("devices, readers, batch, steps, new", LAYOUTS)
def test_rescale_keeps_the_per_device_batch_and_each_row_once(devices, readers, batch, steps, new):
    old = ShardLayout(devices, readers, batch, steps)
    rest = Remainder(old, new, "rescale", calls_done=1)
    assert (rest.batch_per_step, rest.steps_per_call) == (batch, rest.slots * steps)
    made, wanted = _new_steps(rest), _old_steps(old)
    for device in made:  # each step of a device is one old step of one old device, or padding
        for step in device:
            real = [row for row in step if row is not None]
            assert not real or any(set(real) == w for old_step in wanted for w in old_step)
    everything = [row for device in made for step in device for row in step if row is not None]
    assert sorted(everything) == sorted(set().union(*[w for old_step in wanted for w in old_step]))


def test_old_devices_go_round_the_new_ones_with_padding_slots():
    rest = Remainder(ShardLayout(5, 2, 4, 1), 2, "keep", calls_done=3)
    assert [rest.hosted(d) for d in range(2)] == [[0, 2, 4], [1, 3, None]]
    assert rest.shard_ids([1]) == [2, 3, 6, 7] and rest.shard_ids([0, 1]) == [0, 1, 4, 5, 8, 9, 2, 3, 6, 7]
    grown = Remainder(ShardLayout(1, 1, 4, 1), 3, "keep", calls_done=1)
    assert [grown.hosted(d) for d in range(3)] == [[0], [None], [None]] and grown.shard_ids([1, 2]) == []


def test_a_layout_counts_its_calls_as_dali_pads_its_shards():
    """800 samples on 2 devices of 60: shards of 400, 7 calls (the last part padding); as shards.steps_per_epoch."""
    from dali_launch.trainer.data.shards import steps_per_epoch

    layout = ShardLayout(2, 1, 60, 1)
    assert (layout.calls_per_epoch(800), layout.call_samples, layout.reader_batch) == (7, 120, 60)
    for n, d, r, b, k in [(1001, 3, 2, 8, 3), (210, 2, 1, 4, 1), (60000, 8, 4, 50, 24)]:
        assert ShardLayout(d, r, b, k).calls_per_epoch(n) == steps_per_epoch(n, d * r, b * k // r)
    assert ShardLayout.from_dict(layout.as_dict()) == layout
    assert np.array_equal(Remainder(layout, 2, "keep", 1).row_order(), np.arange(60))  # nothing moves
