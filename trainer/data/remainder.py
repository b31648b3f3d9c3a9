"""The rest of a shard-order epoch begun on another layout: that layout's pipelines, rebuilt from their
checkpointed states, hosted on this job's devices and read to the epoch's end (hosting.py says where
each goes and how a device's rows make its steps). Every sample the interrupted epoch had not seen is
seen once: each old pipeline emits exactly its rest; padding slots and the old shards' padding rows
are masked out of every sum.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.data import dali, shards
from dali_launch.trainer.data.batches import DeviceBatches, Readers, device_batch
from dali_launch.trainer.data.decided import DataPlan
from dali_launch.trainer.data.hosting import Remainder


class RemainderBatches(DeviceBatches):
    """DeviceBatches whose device calls come from the old layout's pipelines this process hosts, calls
    `remainder.calls_done` to the old epoch's last; `main` is the job's own (its devices, mesh and start)."""

    def __init__(self, pipes: list, main: DeviceBatches, remainder: Remainder, sample: dict):
        old, mesh = remainder.reading, list(main.sharding_spec.mesh.devices.flat)
        readers = Readers(main.devices, mesh, main.sharding)
        super().__init__(pipes, readers, main.num_samples, old.reader_batch, main.start, main.names)
        self.remainder, self.sample = remainder, sample
        self.steps, self.call = old.calls_per_epoch(main.num_samples), remainder.calls_done
        self.hosted = [remainder.hosted(d) for d in main.sharding.device_ids]
        order = remainder.row_order()
        self.order = None if np.array_equal(order, np.arange(order.size)) else order  # None: rows stay put
        self.rows_per_slot = old.readers * old.reader_batch
        self.zeros = {}  # (output, device) -> a padding slot's rows, made once

    @property
    def reading(self):
        return self.remainder.reading

    def pipeline_shards(self, process: int, processes: int) -> list[int]:
        local = len(self.devices)
        return self.remainder.shard_ids(range(process * local, (process + 1) * local))

    def close(self) -> None:
        """Its pipelines go (the epoch is read): nothing holds them after the loop moves on."""
        self.pipes.clear()

    def _rows(self, outputs: list, i: int) -> list[jax.Array]:
        """Output `i` of every local device, shaped (1, rows, ...): its slots' rows (an old device's readers, or
        zeros), in step order."""
        per_device, at = [], 0
        for device, hosted in zip(self.devices, self.hosted):
            slots = []
            for old in hosted:
                if old is None:
                    slots.append(self._padding(self.names[i], device))
                    continue
                r = self.remainder.reading.readers
                slots.append(device_batch([out[i] for out in outputs[at : at + r]], device))
                at += r
            rows = slots[0] if len(slots) == 1 else jnp.concatenate(slots)
            per_device.append((rows if self.order is None else jnp.take(rows, self.order, axis=0))[None])
        return per_device

    def _padding(self, name: str, device) -> jax.Array:
        """A padding slot's rows: zeros shaped like a sample (the checkpoint's record), never counted."""
        if (name, device) not in self.zeros:
            sample = self.sample[name]
            zeros = np.zeros((self.rows_per_slot, *sample["shape"]), sample["dtype"])
            self.zeros[name, device] = jax.device_put(zeros, device)
        return self.zeros[name, device]

    def _valid(self) -> list[np.ndarray]:
        old = self.remainder.reading
        masks = []
        for hosted in self.hosted:
            rows = [
                shards.Sharding(d, 1, old.devices, old.readers).valid(self.num_samples, self.call, old.reader_batch)[0]
                if d is not None
                else np.zeros(self.rows_per_slot, np.float32)
                for d in hosted
            ]
            mask = np.concatenate(rows)
            masks.append(mask if self.order is None else mask[self.order])
        return masks


def build(split: dali.Split, devices: list, remainder: Remainder, data: DataPlan, start, main):
    """The old layout's pipelines this process hosts (`devices`: its own) reading training's `split`, each built as
    the old job built it (its shard, batch and seed) and restored from its state (`start`, the start point: its
    states by shard, and the sample its record holds, which shapes padding slots); `data` as the data plan decided,
    its threads shared out among the pipelines a device now runs; `main`: the job's own training batches."""
    old, function = remainder.reading, dali.pipeline_function(data)
    # The checkpoint's DALI graph, decoded cache included (the data plan keeps its kind): a host table of the
    # old shards hosted here, apart from the job's own (main's), for this epoch's rest alone.
    hosted = [d for device in main.sharding.device_ids for d in remainder.hosted(device) if d is not None]
    keep, _ = dali.decoded_role(function, split, (hosted, old.devices), data, data.reader_threads)
    threads = max(1, data.reader_threads * main.sharding.readers // (remainder.slots * old.readers))
    data = dataclasses.replace(data, reader_threads=threads)
    pipes, shard_ids = [], []
    for local, device in enumerate(main.sharding.device_ids):
        for shard in remainder.shard_ids([device]):
            args = dali.pipeline_args(split, shard, old.num_shards, old.reader_batch, data)
            args = dataclasses.replace(args, decoded_cache=keep)
            pipe = dali.make_pipeline(function, args, data, devices[local], start.states[shard], split.outputs)
            pipes.append(pipe)
            shard_ids.append(shard)
    for pipe in pipes:
        pipe.build()
    for pipe, shard in zip(pipes, shard_ids):
        dali.epoch_size(pipe, data.pipeline, shard, old.num_shards)  # read as the old job read it
    return RemainderBatches(pipes, main, remainder, start.shards["sample"])
