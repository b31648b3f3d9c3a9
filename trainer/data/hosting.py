"""Shard order on another topology: the layout an epoch's shards are read with, and how the rest of an
epoch begun on one layout is read on another. Pure arithmetic (numpy only): the start point reads it
without JAX or DALI.

A shard-order epoch is its pipelines' epoch: S = D·R DALI readers, each padding its own shard to whole
batches (shards.py). A checkpoint holds every one of them (their DALI states, by shard id), so the rest
of an interrupted epoch is exactly what those pipelines would still emit. On D' other devices it is
read by hosting them: old device d goes to new device d mod D', each new device has H = ceil(D/D')
slots, an old device's R pipelines or padding (zeros, masked). A new device's call holds, step after
step, each of its slots' rows of that old step (in the old device's sample order, parallel.sample_order):
  keep     (--elastic-batch) a step is every slot's rows of old step j: H·b rows per device, the old
           job's step j exactly (the same samples, the same count of steps and learning rates);
  rescale  a step is one slot's rows: b rows per device (the per-device batch kept), H·k steps a call.
The next epoch reads this layout's own shards from its start.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ShardLayout:
    """How an epoch's shards are read: D devices of R readers, b samples per device per step, k steps a call."""

    devices: int
    readers: int
    batch: int  # b: per device per step
    steps: int  # k: per call

    @property
    def reader_batch(self) -> int:
        """Samples each reader gives a call (its DALI batch)."""
        return self.batch * self.steps // self.readers

    @property
    def num_shards(self) -> int:
        return self.devices * self.readers

    @property
    def call_samples(self) -> int:
        """Rows of one call of the whole job, padding included."""
        return self.devices * self.batch * self.steps

    def calls_per_epoch(self, num_samples: int) -> int:
        """Calls in an epoch: every shard padded to the largest one's batches (shards.steps_per_epoch)."""
        return math.ceil(math.ceil(num_samples / self.num_shards) / self.reader_batch)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> ShardLayout:
        return cls(**values)


@dataclass(frozen=True)
class Remainder:
    """The rest of an epoch read with `reading`'s pipelines, hosted on `devices` devices, from call `calls_done`."""

    reading: ShardLayout
    devices: int  # D', this job's
    rule: str  # --elastic-batch: keep or rescale
    calls_done: int

    @property
    def slots(self) -> int:
        """H: old devices (or padding) per new device."""
        return math.ceil(self.reading.devices / self.devices)

    def hosted(self, device: int) -> list[int | None]:
        """The old devices new device `device` hosts, slot by slot; None: a padding slot."""
        old = list(range(device, self.reading.devices, self.devices))
        return old + [None] * (self.slots - len(old))

    def shard_ids(self, devices) -> list[int]:
        """The old shards whose pipelines the new `devices` run, in pipeline order (device, slot, reader)."""
        r = self.reading.readers
        return [d * r + k for device in devices for d in self.hosted(device) if d is not None for k in range(r)]

    @property
    def batch_per_step(self) -> int:
        return self.slots * self.reading.batch if self.rule == "keep" else self.reading.batch

    @property
    def steps_per_call(self) -> int:
        return self.reading.steps if self.rule == "keep" else self.slots * self.reading.steps

    def row_order(self) -> np.ndarray:
        """Where each row of a new device's call comes from, among its slots' rows (slot after slot, each
        its readers' rows end to end, as DALI gives them): step after step, each slot's rows of that step."""
        r, rows, b = self.reading.readers, self.reading.reader_batch, self.reading.batch
        q = np.arange(b * self.reading.steps)  # an old device's rows in sample order: row q is reader q % R's q // R-th
        per_step = ((q % r) * rows + q // r).reshape(self.reading.steps, b)
        slot_starts = np.arange(self.slots)[None, :, None] * (r * rows)
        return (per_step[:, None, :] + slot_starts).reshape(-1)

    def describe(self, epoch: int) -> str:
        k = self.steps_per_call
        per_device = f"{self.batch_per_step} per device a step, {k} step{'s' if k > 1 else ''} a call"
        return (
            f"the rest of epoch {epoch} reads its {self.reading.num_shards} shards' pipelines of "
            f"{self.reading.devices} devices on {self.devices} ({per_device}); epoch {epoch + 1} on this layout's own"
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "slots": self.slots}
