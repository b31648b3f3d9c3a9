"""DALI pipelines: one per local device, each reading its own shard of the global data set.

Exactly-once epochs: every reader pads its shard to whole batches (`pad_last_batch`) and sticks to
it, so shard `s` holds DALI's slice [N*s/S, N*(s+1)/S) and every position past that slice in an
epoch is padding. `valid` masks are computed from those sizes, on the device, never per sample.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import numpy as np
from nvidia.dali import fn, pipeline_def, types

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.errors import UsageError

READER = "caffe2"
AXIS = "devices"  # the pmap axis name and the mesh axis name
NUM_CLASSES = 10


@dataclass(frozen=True)
class Sharding:
    """Which DALI shards this process reads: one per local device."""
    shard_ids: tuple[int, ...]
    num_shards: int


def shard_size(num_samples: int, shard_id: int, num_shards: int) -> int:
    """Samples in one shard, split exactly as DALI's readers split (Loader::start_index)."""
    return num_samples * (shard_id + 1) // num_shards - num_samples * shard_id // num_shards


def steps_per_epoch(num_samples: int, num_shards: int, batch_size: int) -> int:
    """Batches every shard yields per epoch: DALI pads all shards to the largest one's batch count."""
    return math.ceil(math.ceil(num_samples / num_shards) / batch_size)


@pipeline_def(enable_conditionals=False)
def mnist_pipeline(path: str, shard_id: int, num_shards: int, training: bool, decoder: str, on_gpu: bool):
    """The example's pipeline: Caffe2 reader -> GRAY decode -> /255 -> flatten -> (one-hot) labels."""
    jpegs, labels = fn.readers.caffe2(
        path=path, name=READER, shard_id=shard_id, num_shards=num_shards,
        random_shuffle=training, pad_last_batch=True, stick_to_shard=True)
    images = fn.decoders.image(jpegs, device="mixed" if decoder == "mixed" else "cpu", output_type=types.GRAY)
    if on_gpu:  # move uint8 pixels, 4x less than the normalised floats
        images, labels = images.gpu(), labels.gpu()
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
    images = fn.reshape(images, shape=[-1])
    labels = fn.one_hot(labels, num_classes=NUM_CLASSES) if training else fn.reshape(labels, shape=[])
    return images, labels


class DeviceBatches:
    """Runs one pipeline per local device and joins their outputs into one array per output name.

    The arrays are sharded over the job-wide device mesh (leading axis = device), the layout pmap
    and jit both take without a copy. DALI's own JAX iterator is not used: it stacks CPU outputs on
    one device and cannot shard across processes (see FIELD-NOTES).
    """
    names = ("images", "labels")

    def __init__(self, pipes: list, devices: list, mesh_devices: list, num_samples: int, batch_size: int):
        self.pipes, self.devices, self.num_samples, self.batch_size = pipes, devices, num_samples, batch_size
        self.steps = steps_per_epoch(num_samples, len(mesh_devices), batch_size)
        mesh = jax.sharding.Mesh(np.array(mesh_devices), (AXIS,))
        self.sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
        self.global_devices = len(mesh_devices)

    def epoch(self):
        """Exactly `steps` batches: with padded shards that is one pass over every shard."""
        for _ in range(self.steps):
            yield self.next()

    def next(self) -> dict:
        outputs = [pipe.run() for pipe in self.pipes]
        return {name: self._join([_dali_to_jax(out[i].as_tensor(), d) for out, d in zip(outputs, self.devices)])
                for i, name in enumerate(self.names)}

    def put(self, values):
        """Host values (arrays or pytrees), one per local device, as job-wide arrays laid out like the batches."""
        per_device = [jax.device_put(v, d) for v, d in zip(values, self.devices)]
        return jax.tree.map(lambda *shards: self._join(list(shards)), *per_device)

    def _join(self, arrays: list) -> jax.Array:
        shards = [a[None] for a in arrays]
        shape = (self.global_devices, *shards[0].shape[1:])
        return jax.make_array_from_single_device_arrays(shape, self.sharding, shards)


def _dali_to_jax(tensor, device) -> jax.Array:
    """GPU outputs stay on their GPU (DLPack, then a device copy: DALI reuses its buffers)."""
    if device.platform == "gpu":
        return jax.dlpack.from_dlpack(tensor).copy()
    return jax.device_put(np.array(tensor), device)


def build(path: str, devices: list, mesh_devices: list, sharding: Sharding, batch_size: int, training: bool,
          config: DataConfig, seed: int) -> DeviceBatches:
    """Pipelines for this process's devices, reading `sharding`'s shards; `mesh_devices` is the job's."""
    pipes = []
    for device, shard_id in zip(devices, sharding.shard_ids):
        on_gpu = device.platform == "gpu"
        if config.decoder == "mixed" and not on_gpu:
            raise UsageError("--decoder mixed decodes on the GPU, but this run has CPU devices; use --decoder cpu")
        pipes.append(mnist_pipeline(
            path=path, shard_id=shard_id, num_shards=sharding.num_shards, training=training,
            decoder=config.decoder, on_gpu=on_gpu, batch_size=batch_size, num_threads=config.reader_threads,
            device_id=device.local_hardware_id if on_gpu else None, seed=seed + shard_id,
            prefetch_queue_depth=2))
    for pipe in pipes:
        pipe.build()
    return DeviceBatches(pipes, devices, mesh_devices, pipes[0].epoch_size(READER), batch_size)
