"""Class ids out of range, caught while training: the only guard a `--pipeline` of the user's own has.

The launcher reads every label of a Caffe2 LMDB before a run (launcher/data/datasets.py); a pipeline
function of the user's own reads a format of its own, so its labels are first seen here. Nothing
else fails on them: `jax.nn.one_hot` of 12 with 10 classes is a zero row, its loss 0, and the run
ends with exit 0 having learnt nothing from those samples. So every device call folds the smallest
and largest class id of its batch into the tally (two reductions on the device, no collective, no
sync), and the host reads them where it already waits for the devices: the loop's sync points and
the end of each epoch. Float labels (one-hot or soft targets) have no class ids to bound; their
width is checked when the step is traced.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.data.contract import class_ids
from dali_launch.trainer.errors import UsageError

NONE = (np.iinfo(np.int32).max, np.iinfo(np.int32).min)  # the range of no labels yet


def none() -> np.ndarray:
    return np.array(NONE, np.int32)


def fold(seen, labels):
    """`seen` ([min, max] so far) widened by one device's batch of labels (rows, ...): inside the step."""
    if labels.dtype.kind == "f":
        return seen
    ids = class_ids(labels).astype(jnp.int32)
    return jnp.stack([jnp.minimum(seen[0], ids.min()), jnp.maximum(seen[1], ids.max())])


def check(seen, num_classes: int, pipeline: str, split: str) -> None:
    """Raises the one-line error if this process's devices saw a class id outside 0..num_classes-1.

    `seen` is laid out one row per device (job-wide); only this process's rows are read."""
    check_range(*bounds(seen), num_classes, pipeline, split)


def bounds(seen) -> tuple[int, int]:
    """The smallest and largest class id this process's devices saw (`seen` laid out one row per device)."""
    rows = np.concatenate([np.asarray(shard.data).reshape(-1, 2) for shard in seen.addressable_shards])
    return int(rows[:, 0].min()), int(rows[:, 1].max())


def check_range(low: int, high: int, num_classes: int, pipeline: str, split: str) -> None:
    if high >= num_classes:
        raise UsageError(
            f"--num-classes {num_classes} but --pipeline {pipeline} gave {split} label {high}; "
            f"use --num-classes {high + 1} or more"
        )
    if low < 0:
        raise UsageError(
            f"--pipeline {pipeline} gave {split} label {low}; labels are class ids 0..{num_classes - 1}, "
            f"so fix the labels it returns"
        )
