"""--sample-order global: one pipeline's reader fed through `fn.external_source` from a record source,
in the job's global order (global_order.py), starting at a recorded position of an epoch.

`PipelineArgs.read()` comes here: under --sample-order shards it is DALI's native reader on the
device's shard (the fastest way, and today's); under global the same records through a `Feed`.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field

import numpy as np
from nvidia.dali import fn, types

from dali_launch.trainer.data import bad_samples, protobuf, records
from dali_launch.trainer.data.global_order import Layout, permutation
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience.ending import die_with_parent


@dataclass
class Feed:
    """The batches of one reader of one device, call after call, epoch after epoch, from (epoch, call).

    A stateless callable of DALI's `BatchInfo`, as a parallel external source must be: DALI calls it
    ahead of the trainer (prefetch), in its worker processes (`workers` > 0) in any order, or in the
    pipeline's thread. Batch `iteration` is call `iteration - first_iteration` since (epoch, call): a
    pipeline restored from a checkpoint numbers on from the checkpoint's iteration (`restored_iteration`).
    `offset` shifts the first epoch's positions: a run resumed with another global batch continues at
    a position that is no multiple of its calls.
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
    workers: int = 0  # DALI worker processes that call it; 0: the pipeline's own thread, under our GIL
    first_iteration: int = 0
    source: records.RecordSource | None = None
    _order: tuple[int, np.ndarray] | None = field(default=None, repr=False)

    @property
    def layout(self) -> Layout:
        return Layout(len(self.source), self.devices, self.batch, self.steps, self.readers)

    def __call__(self, info: types.BatchInfo):
        epoch, call, offset = self._where(info.iteration - self.first_iteration)
        layout = self.layout
        positions = layout.positions(offset + call * layout.call_samples, self.device, self.reader)
        # Padding rows repeat a real sample (they are decoded, then masked out of every sum).
        indices = self._permutation(epoch)[np.minimum(positions, layout.num_samples - 1)]
        samples = [self.source.read(int(i)) for i in indices]
        return [s[0] for s in samples], [second(s[1]) for s in samples]

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

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_order": None, "_pickled_by": os.getpid()}

    def __setstate__(self, state: dict) -> None:
        parent = state.pop("_pickled_by")
        self.__dict__.update(state)
        if os.getpid() != parent:  # a DALI worker: SIGKILLed with its rank, so no worker outlives a job
            die_with_parent(parent)
            # Out of the rank's process group: a terminal's Ctrl-C or a SIGTERM to the group is the rank's to
            # answer (a checkpoint at its next sync point); one that also ended the workers failed the rank's
            # pipelines first (a traceback and no checkpoint, or a hang). DALI stops them by their pids.
            with contextlib.suppress(OSError):  # a worker that cannot leave (EPERM) still works
                os.setpgid(0, 0)


def second(value):
    """A sample's class id as DALI's readers give it ((1,) int32), or its encoded second member as it is (a mask)."""
    return value if isinstance(value, np.ndarray) else np.array([value], np.int32)


def restored_iteration(checkpoint: bytes | None) -> int:
    """The iteration a pipeline built from `checkpoint` (`Pipeline.checkpoint()`) numbers its next batch,
    and so its external sources' `BatchInfo.iteration`: the batches consumed before it was taken.
    DALI's checkpoint.proto: field 2, ExternalContextCheckpoint, whose field 1 is JSON {"iter": ...}."""
    if checkpoint is None:
        return 0
    context = dict(protobuf.fields(checkpoint)).get(2, b"")
    return json.loads(dict(protobuf.fields(context)).get(1, b"{}")).get("iter", 0)


def read(args, reader: str, kwargs: dict):
    """What `args.read(reader, **kwargs)` returns: (encoded, labels) DataNodes from this device's shard
    (DALI's `fn.readers.<reader>`) or from the global order (`args.feed`); the split's bad samples left out
    (--bad-samples skip: their scan kept in `args.left_out`, for the pipelines' DeviceBatches) or refused
    (stop) first."""
    kwargs, left_out = bad_samples.screen(reader, kwargs, args.bad_samples, args.max_bad_samples)
    if left_out:
        args.left_out.append(left_out)
    if args.feed is None:
        native = records.native_arguments(reader, kwargs)  # class folders: process 0's listing, if shared
        return records.native(reader, getattr(fn.readers, reader)(**native, **args.reader_args()), kwargs)
    try:
        args.feed.source = records.open_source(reader, kwargs)
    except KeyError:
        raise UsageError(
            f"--sample-order global reads {', '.join(sorted(records.readers()))} records, not fn.readers.{reader}'s; "
            f"use --sample-order shards"
        ) from None
    # Parallel: two batches in flight per worker, so none waits for the pipeline to ask.
    parallel = {"parallel": True, "prefetch_queue_depth": 2 * args.feed.workers} if args.feed.workers else {}
    encoded = getattr(args.feed.source, "encoded_second", False)  # a mask's bytes, not a class id
    dtype = [types.UINT8, types.UINT8 if encoded else types.INT32]
    return fn.external_source(source=args.feed, num_outputs=2, batch=True, batch_info=True, dtype=dtype, **parallel)


def pipeline_options(feed: Feed | None) -> dict:
    """Pipeline options for a feed's workers. Spawned, not forked: the rank already runs JAX's and XLA's
    threads, which a fork copies mid-state. A spawned worker imports the rank's modules (seconds)."""
    if feed is None or not feed.workers:
        return {}
    return {"py_num_workers": feed.workers, "py_start_method": "spawn"}
