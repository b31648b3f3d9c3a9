"""--sample-order global: one pipeline's reader fed through `fn.external_source` from a record source,
in the job's global order (global_order.py), starting at a recorded position of an epoch.

`PipelineArgs.read()` comes here: under --sample-order shards it is DALI's native reader on the
device's shard (the fastest way, and today's); under global the same records through a `Feed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from nvidia.dali import fn, types

from dali_launch.trainer.data import records
from dali_launch.trainer.data.global_order import Layout, permutation
from dali_launch.trainer.errors import UsageError


@dataclass
class Feed:
    """The batches of one reader of one device, call after call, epoch after epoch, from (epoch, call).

    DALI calls it ahead of the trainer (prefetch), once per batch; calls are numbered from the start,
    so the batches do not depend on when DALI asks. `offset` shifts the first epoch's positions: a
    run resumed with another global batch continues at a position that is no multiple of its calls.
    """

    seed: int
    devices: int
    batch: int  # per device per step
    steps: int  # per call
    readers: int
    device: int  # global index
    reader: int
    epoch: int = 0
    call: int = 0  # in `epoch`
    offset: int = 0
    source: records.RecordSource | None = None
    calls_made: int = field(default=0, repr=False)
    _order: tuple[int, np.ndarray] | None = field(default=None, repr=False)

    @property
    def layout(self) -> Layout:
        return Layout(len(self.source), self.devices, self.batch, self.steps, self.readers)

    def __call__(self):
        epoch, call, offset = self._where(self.calls_made)
        self.calls_made += 1
        layout = self.layout
        positions = layout.positions(offset + call * layout.call_samples, self.device, self.reader)
        # Padding rows repeat a real sample (they are decoded, then masked out of every sum).
        indices = self._permutation(epoch)[np.minimum(positions, layout.num_samples - 1)]
        samples = [self.source.read(int(i)) for i in indices]
        return [s[0] for s in samples], [np.array([s[1]], np.int32) for s in samples]

    def _where(self, n: int) -> tuple[int, int, int]:
        """(epoch, call in it, offset) of the n-th call since the start."""
        per_epoch, first_left = self.layout.calls_per_epoch(), self.layout.calls_per_epoch() - self.call
        if n < first_left:
            return self.epoch, self.call + n, self.offset
        later, call = divmod(n - first_left, per_epoch)
        return self.epoch + 1 + later, call, 0

    def _permutation(self, epoch: int) -> np.ndarray:
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, permutation(self.seed, epoch, len(self.source)))
        return self._order[1]


def read(args, reader: str, kwargs: dict):
    """What `args.read(reader, **kwargs)` returns: (encoded, labels) DataNodes from this device's shard
    (DALI's `fn.readers.<reader>`) or from the global order (`args.feed`)."""
    if args.feed is None:
        return records.native(reader, getattr(fn.readers, reader)(**kwargs, **args.reader_args()))
    try:
        args.feed.source = records.open_source(reader, kwargs)
    except KeyError:
        raise UsageError(
            f"--sample-order global reads {', '.join(sorted(records.FORMATS))} records, not fn.readers.{reader}'s; "
            f"use --sample-order shards"
        ) from None
    encoded, labels = fn.external_source(source=args.feed, num_outputs=2, batch=True, dtype=[types.UINT8, types.INT32])
    return encoded, labels
