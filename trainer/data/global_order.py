"""The global sample order (--sample-order global): which sample every row of every device call holds,
whatever the number of processes, devices and readers. Pure functions of a few integers.

Epoch e reads a permutation of the N samples that depends on (seed, e) only. SGD step s of the epoch
takes positions [s*B, (s+1)*B) of it (B: the global batch), device d of D the part
[s*B + d*b, s*B + (d+1)*b) (b = B/D). A device call holds --steps-per-call steps; a device's R readers
each read every R-th of its rows (reader r's i-th row is the device's row i*R + r, as parallel.sample_order
takes them). Positions >= N are padding, masked out. So a step holds the same samples on any device
count that keeps B, and a run can continue at position P of an epoch on another topology.

(Each step a contiguous range, rather than each call: a call's range split by device would give a
step samples that depend on D and --steps-per-call.)
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np


def permutation(seed: int, epoch: int, num_samples: int) -> np.ndarray:
    """Epoch `epoch`'s order of the sample indices 0..N-1, from (seed, epoch) alone."""
    return np.random.Generator(np.random.PCG64([seed, epoch])).permutation(num_samples)


@dataclass(frozen=True)
class Layout:
    """How one call's rows map to positions of the epoch's order."""

    num_samples: int  # N
    devices: int  # D, the job's
    batch: int  # b: samples per device per step
    steps: int  # k: SGD steps per device call
    readers: int = 1  # R per device

    @property
    def global_batch(self) -> int:
        return self.batch * self.devices

    @property
    def call_samples(self) -> int:
        """G: positions of the order one device call of the whole job covers."""
        return self.global_batch * self.steps

    def calls_per_epoch(self) -> int:
        """Device calls per epoch. An epoch resumed at a position that is not a multiple of G (another
        global batch) starts there and still ends within as many calls; its last ones may be padding."""
        return math.ceil(self.num_samples / self.call_samples)

    def positions(self, start: int, device: int, reader: int) -> np.ndarray:
        """Positions of the order read by `reader` of `device` in the call that starts at position `start`."""
        rows = np.arange(reader, self.batch * self.steps, self.readers)  # the device's rows this reader reads
        step, within = np.divmod(rows, self.batch)
        return start + step * self.global_batch + device * self.batch + within

    def valid(self, start: int, device: int) -> np.ndarray:
        """1 for real samples, 0 for padding, over a device's rows as DALI gives them (reader after reader)."""
        rows = np.concatenate([self.positions(start, device, r) for r in range(self.readers)])
        return (rows < self.num_samples).astype(np.float32)


def fingerprint(keys: list[bytes]) -> dict:
    """What identifies a data set's samples and their numbering: a checkpoint's order means nothing on another."""
    digest = hashlib.sha256()
    for key in keys:
        digest.update(len(key).to_bytes(4, "little") + key)
    return {"samples": len(keys), "keys_sha256": digest.hexdigest()}
