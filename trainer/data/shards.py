"""Shard arithmetic: which DALI shard each reader reads, how many samples it holds, how many batches
an epoch takes, and which positions of a batch are padding. Pure functions of a few integers.

Each device's slice of the data set is read by `readers` pipelines (--readers-per-device), each
with its own shard: one Caffe2 reader is a serial bottleneck, several read in
parallel. Device d of the job (its global index) is read by shards d*R .. d*R + R-1.

Exactly-once epochs: every reader pads its shard to whole batches (`pad_last_batch`) and sticks to
it, so shard `s` holds DALI's slice [N*s/S, N*(s+1)/S) and every position past that slice in an
epoch is padding. `valid` masks are computed from those sizes, on the device, never per sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Sharding:
    """Which DALI shards this process reads: `readers` per local device, device after device.

    Device d of the job (global index) reads shards d*readers .. d*readers + readers-1.
    """

    first_device: int  # the global index of this process's first device
    local_devices: int
    global_devices: int
    readers: int = 1

    @property
    def num_shards(self) -> int:
        return self.global_devices * self.readers

    @property
    def device_ids(self) -> tuple[int, ...]:
        """The global indices of this process's devices: the device-level slices of the data set."""
        return tuple(range(self.first_device, self.first_device + self.local_devices))

    @property
    def shard_ids(self) -> tuple[int, ...]:
        """Every local reader's shard, in the order of the pipelines: device-major, then reader."""
        return tuple(range(self.first_device * self.readers, (self.first_device + self.local_devices) * self.readers))

    def shard_sizes(self, num_samples: int) -> np.ndarray:
        """Samples in each local reader's shard, shaped (local devices, readers)."""
        sizes = [shard_size(num_samples, s, self.num_shards) for s in self.shard_ids]
        return np.array(sizes, np.int32).reshape(self.local_devices, self.readers)

    def valid(self, num_samples: int, call: int, reader_batch: int) -> list[np.ndarray]:
        """Training's masks of call `call` of an epoch, one per local device (readers end to end)."""
        rows = call * reader_batch + np.arange(reader_batch)
        return [
            (rows[None, :] < sizes[:, None]).reshape(-1).astype(np.float32) for sizes in self.shard_sizes(num_samples)
        ]


def valid_mask(position, shard_sizes, rows_per_reader: int):
    """Evaluation's mask, on the device (cached batches are read again): 1 for real samples, 0 for DALI's padding, over one device's batch: each reader's rows start
    at `position` of its shard (all readers move in step), and its shard holds `shard_sizes[r]`."""
    real = position + jnp.arange(rows_per_reader)[None, :] < shard_sizes[:, None]
    return real.reshape(-1).astype(jnp.float32)


def shard_size(num_samples: int, shard_id: int, num_shards: int) -> int:
    """Samples in one shard, split exactly as DALI's readers split (Loader::start_index)."""
    return num_samples * (shard_id + 1) // num_shards - num_samples * shard_id // num_shards


def steps_per_epoch(num_samples: int, num_shards: int, reader_batch: int) -> int:
    """Batches every shard yields per epoch: DALI pads all shards to the largest one's batch count."""
    return math.ceil(math.ceil(num_samples / num_shards) / reader_batch)


PADDING_WARN = 0.10  # of an epoch's rows: past this, the batch is too large for the data set


def padding_warning(num_samples: int, calls: int, call_batch: int, devices: int, steps_per_call: int) -> str:
    """A warning when more than PADDING_WARN of an epoch's rows are padding ('' otherwise): --batch-size
    100000 on 8,000 images trains one 92 %-padded step an epoch and says nothing."""
    padded = 1 - num_samples / (calls * call_batch * devices)
    if padded <= PADDING_WARN:
        return ""
    share, batch = math.ceil(num_samples / devices), call_batch // steps_per_call
    per = f"--batch-size × --steps-per-call ({batch} × {steps_per_call})" if steps_per_call > 1 else "--batch-size"
    fix = (
        f"use a {per} of at most {share:,}"
        if call_batch > share
        else f"use a {per} that divides the {share:,} samples each device reads"
    )
    return (
        f"warning: {padded:.0%} of each epoch is padding: {num_samples:,} training samples fill {calls} device "
        f"call{'s' if calls != 1 else ''} of {call_batch:,} samples on each of {devices} device"
        f"{'s' if devices != 1 else ''}; {fix}"
    )
