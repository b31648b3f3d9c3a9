"""Training's and evaluation's batches: every reader pipeline of each local device run, their outputs joined into
one job-wide array per output name (leading axis: the device), with the mask of which rows are real.

A device's batch is its readers' batches end to end, reader after reader; shards.py says which shard each reader
reads and which positions are padding. data/dali.py builds the pipelines.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.data import bad_samples, dali_outputs
from dali_launch.trainer.data.hosting import ShardLayout
from dali_launch.trainer.data.rows import AXIS
from dali_launch.trainer.data.shards import Sharding, steps_per_epoch


@dataclass(frozen=True)
class Readers:
    """Who reads: this process's devices, the devices the batches' arrays span (the job's for training, this
    process's own for evaluation, which sums its shards locally), and which shards their pipelines read."""

    devices: list
    mesh_devices: list
    sharding: Sharding


class DeviceBatches:
    """Runs `readers` pipelines per local device and joins their outputs into one array per output name.

    The arrays are sharded over the job-wide device mesh (leading axis = device), the layout pmap
    and jit both take without a copy. DALI's own JAX iterator is not used: it stacks CPU outputs on
    one device and cannot shard across processes.
    """

    def __init__(self, pipes: list, readers: Readers, num_samples: int, reader_batch: int, start=None, names=()):
        """`names`: the task's outputs, in the order the pipelines return them; `start`: training's (dali.Start)."""
        self.pipes, self.devices, self.num_samples, self.sharding = (
            pipes,
            readers.devices,
            num_samples,
            readers.sharding,
        )
        self.reader_batch, self.start, self.names = reader_batch, start, tuple(names)
        mesh_devices, sharding = readers.mesh_devices, readers.sharding
        self.layout = start.layout(num_samples, sharding.readers) if start and start.order == "global" else None
        self.steps = calls_per_epoch(num_samples, sharding, reader_batch, start)
        self.call, self.offset = (start.call, start.offset) if start else (0, 0)  # of the next batch read
        self.fingerprint = (
            None  # the data set (global_order.fingerprint): build sets a global order's, set_up a shard order's
        )
        self.sample = None  # training's one sample: {name: {"shape", "dtype"}} (set_up: sample_spec), for checkpoints
        self.split = ""  # the folder the pipelines read, set by build
        self.left_out = ()  # bad_samples' scans of what the readers leave out (--bad-samples skip), set by build
        self.sharding_spec = batch_sharding(mesh_devices)
        self.peeked = None
        self.host_cache = None  # decoded_cache.HostCache the pipelines read, if --decoded-cache keeps one here
        self.masks = {}  # training's masks on the devices, by their bytes (_masks_on_devices)

    def epoch(self):
        """Exactly `steps` batches: with padded shards that is one pass over every shard."""
        for _ in range(self.steps):
            yield self.next()

    def first_sample(self, name: str) -> np.ndarray:
        """A zero batch of one sample shaped like output `name`, what a model is initialised on. Read from the
        next batch, which `next()` still returns: a pipeline of its own would cost a build."""
        output = self.peek()[name]
        return np.zeros((1, *output.shape[2:]), output.dtype)

    def peek(self) -> dict:
        """The next batch, which `next()` still returns."""
        if self.peeked is None:
            self.peeked = self._read()
        return self.peeked

    def next(self) -> dict:
        batch, self.peeked = self.peeked or self._read(), None
        return batch

    def sample_spec(self) -> dict:
        """One sample of each output, as a checkpoint records it: its shape and dtype."""
        batch = self.peek()
        return {name: {"shape": list(batch[name].shape[2:]), "dtype": batch[name].dtype.name} for name in self.names}

    @property
    def reading(self) -> ShardLayout:
        """The shard layout training's pipelines read (checkpoint.shard_record)."""
        return ShardLayout(self.sharding.global_devices, self.sharding.readers, self.start.batch, self.start.steps)

    def pipeline_shards(self, process: int, processes: int) -> list[int]:
        """The shards process `process` of `processes` reads, in its pipelines' order (every process has as
        many devices as this one)."""
        first = process * len(self.devices) * self.sharding.readers
        return list(range(first, first + len(self.pipes)))

    def _read(self) -> dict:
        try:
            outputs = [pipe.run() for pipe in self.pipes]
        except RuntimeError as e:  # an image the header check let through, undecodable: one line
            raise bad_samples.decode_failure(e, self.split) or e from None
        batch = {name: self._join(self._rows(outputs, i)) for i, name in enumerate(self.names)}
        if self.start:  # training: which rows are real, for the step's sums
            batch["valid"] = self._masks_on_devices(self._valid())
            self.call, self.offset = (self.call + 1, self.offset) if self.call + 1 < self.steps else (0, 0)
        return batch

    def _rows(self, outputs: list, i: int) -> list[jax.Array]:
        """Output `i` of every local device, shaped (1, rows, ...): its readers' batches end to end."""
        r = self.sharding.readers
        return [
            device_batch([out[i] for out in outputs[k * r : (k + 1) * r]], d, lead=True)
            for k, d in enumerate(self.devices)
        ]

    def _masks_on_devices(self, masks: list[np.ndarray]) -> jax.Array:
        """`masks` as a job-wide array. An epoch has a few distinct masks (all rows real but for its last
        calls), kept on the devices once made: a transfer per call cost the host more than the step."""
        key = b"".join(m.tobytes() for m in masks)
        if key not in self.masks:
            if len(self.masks) >= MAX_MASKS:  # a global order's masks may all differ: keep the newest few
                self.masks.clear()
            self.masks[key] = self.put(masks)
        return self.masks[key]

    def _valid(self) -> list[np.ndarray]:
        """The masks of the call about to be made, one per local device."""
        if self.layout is None:
            return self.sharding.valid(self.num_samples, self.call, self.reader_batch)
        first = self.offset + self.call * self.layout.call_samples
        return [self.layout.valid(first, d) for d in self.sharding.device_ids]

    def put(self, values):
        """Host values (arrays or pytrees), one per local device, as job-wide arrays laid out like the batches."""
        # the leading axis added on the host: on a device array it is one more dispatched program
        per_device = [
            jax.device_put(jax.tree.map(lambda x: np.asarray(x)[None], v), d) for v, d in zip(values, self.devices)
        ]
        return jax.tree.map(lambda *shards: self._join(list(shards)), *per_device)

    def shard_sizes(self) -> jax.Array:
        """Every reader's shard size, on the devices: (devices, readers), evaluation's masks' other input."""
        return self.put(list(self.sharding.shard_sizes(self.num_samples)))

    def _join(self, shards: list) -> jax.Array:
        """Each local device's (1, ...) array as one array over the mesh (the job, or one process)."""
        shape = (self.sharding_spec.mesh.devices.size, *shards[0].shape[1:])
        return jax.make_array_from_single_device_arrays(shape, self.sharding_spec, shards)


def calls_per_epoch(num_samples: int, sharding: Sharding, reader_batch: int, start) -> int:
    """Device calls an epoch: with padded shards one pass over every shard, or a global order's calls."""
    if start and start.order == "global":
        return start.layout(num_samples, sharding.readers).calls_per_epoch()
    return steps_per_epoch(num_samples, sharding.num_shards, reader_batch)


def batch_sharding(mesh_devices: list) -> jax.sharding.NamedSharding:
    """How a batch lies over `mesh_devices`: its leading axis, one row per device."""
    mesh = jax.sharding.Mesh(np.array(mesh_devices), (AXIS,))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))


MAX_MASKS = 8  # distinct training masks kept on the devices (DeviceBatches._masks_on_devices)


def device_batch(outputs: list, device, lead: bool = False) -> jax.Array:
    """One device's readers' outputs, end to end, in a buffer of JAX's own (DALI reuses its buffers);
    `lead`: with a leading axis of 1, the shape a job-wide array is joined from.

    GPU outputs stay on their GPU: DLPack views (on `device`, the pipeline's own GPU: no copy), then one
    program that copies (or concatenates) them.
    """
    tensors = [out.as_tensor() for out in outputs]
    if dali_outputs.on_gpu(tensors[0]):
        return _copied(lead, *(jax.dlpack.from_dlpack(t, device=device) for t in tensors))
    host = np.array(tensors[0]) if len(tensors) == 1 else np.concatenate([np.asarray(t) for t in tensors])
    return jax.device_put(host[None] if lead else host, device)


@partial(jax.jit, static_argnums=0)
def _copied(lead: bool, *views):
    """DALI's device buffers copied into one of JAX's, with the leading axis where `lead` asks for it."""
    rows = jnp.concatenate(views) if len(views) > 1 else jnp.copy(views[0])  # a new buffer: DALI reuses its own
    return rows[None] if lead else rows
