"""DALI pipelines: one per local device, each reading its own shard of the global data set.

Each device's slice of the data set is read by `readers` pipelines (--readers-per-device), each
with its own shard: one Caffe2 reader is a serial bottleneck (FIELD-NOTES), several read in
parallel. A device's batch is its readers' batches end to end, reader after reader.

Exactly-once epochs: every reader pads its shard to whole batches (`pad_last_batch`) and sticks to
it, so shard `s` holds DALI's slice [N*s/S, N*(s+1)/S) and every position past that slice in an
epoch is padding. `valid` masks are computed from those sizes, on the device, never per sample.

The pipeline contract (`--pipeline package.module:function`; built-ins in pipelines.py):
`function(args: PipelineArgs) -> (images, labels)` is called inside our `pipeline_def`, once per
device and split, and returns two DALI DataNodes:
- exactly one reader, given `**args.reader_args()` (shard, padding, shuffling: the masks rely on it),
  reading `args.path` (DATA_DIR/training or DATA_DIR/testing); any reader name;
- `images`: one shape and dtype for every sample, in training and in evaluation (the model is
  initialised on it); CPU or GPU outputs (`args.on_gpu`: GPU ones reach JAX without a host copy);
  decoders are given `device=args.decode_device()`; a function whose images are so small that the
  CPU decodes them faster may say so with an attribute, `function.auto_decoder = "cpu"` (placement.py);
- `labels`: integer class ids (shape () or (1,)) in 0..num_classes-1 (checked while training:
  label_check.py), or float one-hot/soft targets (num_classes,).
Evaluation (`training=False`) must be deterministic: its decoded batches may be kept and reused
(--eval-cache-mb).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from nvidia.dali import backend, pipeline_def

from dali_launch.trainer import entry_points, placement
from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.errors import UsageError

AXIS = "devices"  # the pmap axis name and the mesh axis name


@dataclass(frozen=True)
class PipelineArgs:
    """What a pipeline function receives: one device's view of one split."""
    path: str  # the split's folder: DATA_DIR/training or DATA_DIR/testing
    shard_id: int  # this device's shard of the split, of num_shards
    num_shards: int
    batch_size: int  # samples per DALI batch of this reader: the device's per call / --readers-per-device
    training: bool  # shuffle and augment; False: evaluation, every sample once
    on_gpu: bool  # the pipeline runs on the device's GPU (decoder mixed); outputs may stay on it
    decoder: str  # --decoder resolved (placement.decoder): cpu or mixed
    seed: int  # the pipeline's seed, already used by DALI's random operators and shuffling
    num_classes: int  # --num-classes
    image_size: int  # --image-size: the side of square crops, for pipelines that crop

    def reader_args(self) -> dict:
        """Keyword arguments for the pipeline's one reader: this device's shard, padded to whole batches."""
        return {"shard_id": self.shard_id, "num_shards": self.num_shards, "random_shuffle": self.training,
                "pad_last_batch": True, "stick_to_shard": True}

    def decode_device(self) -> str:
        """`device=` for fn.decoders.*."""
        return self.decoder


def class_ids(labels, batch_dims: int = 1):
    """Integer class ids from either kind of labels the contract allows (numpy or jax arrays)."""
    return labels.argmax(-1) if labels.dtype.kind == "f" else labels.reshape(labels.shape[:batch_dims])


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


def readers_per_device(config: DataConfig, platform: str, batch_size: int, cores_per_device: int) -> int:
    """--readers-per-device, where 0 (auto) is 1 on CPU devices (few cores to share) and on GPUs the most of
    8, 4, 2, 1 that divides the per-device batch (each reader reads an equal part of it) and whose threads
    (--reader-threads each) fit in `cores_per_device`."""
    if config.readers_per_device:
        return config.readers_per_device
    if platform != "gpu":
        return 1
    fits = [r for r in (8, 4, 2, 1) if batch_size % r == 0 and r * config.reader_threads <= cores_per_device]
    return fits[0] if fits else 1


def cores_per_device(local_devices: int, processes_here: int) -> int:
    """CPU cores this process may use (SLURM's binding included), per local device, when `processes_here`
    processes share them (local mode starts every process on one host)."""
    return max(1, len(os.sched_getaffinity(0)) // (local_devices * processes_here))


def valid_mask(position, shard_sizes, rows_per_reader: int):
    """1 for real samples, 0 for DALI's padding, over one device's batch: each reader's rows start
    at `position` of its shard (all readers move in step), and its shard holds `shard_sizes[r]`."""
    real = position + jnp.arange(rows_per_reader)[None, :] < shard_sizes[:, None]
    return real.reshape(-1).astype(jnp.float32)


def shard_size(num_samples: int, shard_id: int, num_shards: int) -> int:
    """Samples in one shard, split exactly as DALI's readers split (Loader::start_index)."""
    return num_samples * (shard_id + 1) // num_shards - num_samples * shard_id // num_shards


def steps_per_epoch(num_samples: int, num_shards: int, batch_size: int) -> int:
    """Batches every shard yields per epoch: DALI pads all shards to the largest one's batch count."""
    return math.ceil(math.ceil(num_samples / num_shards) / batch_size)


@pipeline_def(enable_conditionals=False)
def graph(function, args: PipelineArgs, name: str):
    """The user's (or a built-in) pipeline function inside a DALI pipeline; `name` is its --pipeline."""
    outputs = function(args)
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 2:
        raise UsageError(f"--pipeline {name} returned {type(outputs).__name__}; return two DataNodes: images, labels")
    return tuple(outputs)


class DeviceBatches:
    """Runs `readers` pipelines per local device and joins their outputs into one array per output name.

    The arrays are sharded over the job-wide device mesh (leading axis = device), the layout pmap
    and jit both take without a copy. DALI's own JAX iterator is not used: it stacks CPU outputs on
    one device and cannot shard across processes (see FIELD-NOTES).
    """
    names = ("images", "labels")

    def __init__(self, pipes: list, devices: list, mesh_devices: list, num_samples: int, sharding: Sharding,
                 reader_batch: int):
        self.pipes, self.devices, self.num_samples, self.sharding = pipes, devices, num_samples, sharding
        self.reader_batch = reader_batch
        self.steps = steps_per_epoch(num_samples, sharding.num_shards, reader_batch)
        mesh = jax.sharding.Mesh(np.array(mesh_devices), (AXIS,))
        self.sharding_spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
        self.peeked = None

    def epoch(self):
        """Exactly `steps` batches: with padded shards that is one pass over every shard."""
        for _ in range(self.steps):
            yield self.next()

    def first_sample(self) -> np.ndarray:
        """A zero batch of one sample shaped like the images, what a model is initialised on. Read
        from the next batch, which `next()` still returns: a pipeline of its own would cost a build."""
        if self.peeked is None:
            self.peeked = self._read()
        images = self.peeked["images"]
        return np.zeros((1, *images.shape[2:]), images.dtype)

    def next(self) -> dict:
        batch, self.peeked = self.peeked or self._read(), None
        return batch

    def _read(self) -> dict:
        outputs = [pipe.run() for pipe in self.pipes]
        r = self.sharding.readers
        return {name: self._join([_device_batch([out[i] for out in outputs[k * r:(k + 1) * r]], device)
                                  for k, device in enumerate(self.devices)])
                for i, name in enumerate(self.names)}

    def put(self, values):
        """Host values (arrays or pytrees), one per local device, as job-wide arrays laid out like the batches."""
        per_device = [jax.device_put(v, d) for v, d in zip(values, self.devices)]
        return jax.tree.map(lambda *shards: self._join(list(shards)), *per_device)

    def shard_sizes(self) -> jax.Array:
        """Every reader's shard size, on the devices: (devices, readers), the masks' other input."""
        return self.put(list(self.sharding.shard_sizes(self.num_samples)))

    def _join(self, arrays: list) -> jax.Array:
        shards = [a[None] for a in arrays]
        shape = (self.sharding.global_devices, *shards[0].shape[1:])
        return jax.make_array_from_single_device_arrays(shape, self.sharding_spec, shards)


def first_row(tree):
    """This process's first device's row of a pytree laid out one row per device (device arrays)."""
    return jax.tree.map(lambda x: x.addressable_data(0)[0], tree)


def _device_batch(outputs: list, device) -> jax.Array:
    """One device's readers' outputs, end to end, in a buffer of JAX's own (DALI reuses its buffers).

    GPU outputs stay on their GPU: DLPack views, then one device copy (or concatenation).
    """
    tensors = [out.as_tensor() for out in outputs]
    if isinstance(tensors[0], backend.TensorGPU):
        views = [jax.dlpack.from_dlpack(t) for t in tensors]
        return views[0].copy() if len(views) == 1 else jnp.concatenate(views)
    host = np.array(tensors[0]) if len(tensors) == 1 else np.concatenate([np.asarray(t) for t in tensors])
    return jax.device_put(host, device)


def build(path: str, devices: list, mesh_devices: list, sharding: Sharding, batch_size: int, training: bool,
          config: DataConfig, seed: int, checkpoints: list[bytes] | None = None) -> DeviceBatches:
    """Pipelines for this process's devices, reading `sharding`'s shards; `mesh_devices` is the job's.

    `batch_size` is per device and device call; each of a device's readers reads an equal part.
    `checkpoints` (one per pipeline, from `pipe.checkpoint()`) resume each reader where it was.
    """
    if checkpoints is not None and len(checkpoints) != len(sharding.shard_ids):
        raise UsageError(f"the checkpoint holds {len(checkpoints)} DALI readers for this process but it has "
                         f"{len(sharding.shard_ids)}; resume with the run's own --nodes/--gpus-per-node/"
                         f"--tasks-per-node/--readers-per-device")
    if batch_size % sharding.readers:
        raise UsageError(f"--readers-per-device {sharding.readers} does not divide the {batch_size} samples a device "
                         f"reads per call; use a divisor of it")
    reader_batch, function, pipes = batch_size // sharding.readers, entry_points.load("pipeline", config.pipeline), []
    for k, shard_id in enumerate(sharding.shard_ids):
        device = devices[k // sharding.readers]
        args = pipeline_args(path, device, shard_id, sharding.num_shards, reader_batch, training, config,
                             seed + shard_id)
        pipes.append(graph(
            function, args, config.pipeline, batch_size=reader_batch, num_threads=config.reader_threads,
            device_id=device.local_hardware_id if args.on_gpu else None, seed=args.seed,
            prefetch_queue_depth=config.prefetch, enable_checkpointing=True,
            checkpoint=checkpoints[k] if checkpoints else None))
    for pipe in pipes:
        pipe.build()
    sizes = {epoch_size(pipe, config.pipeline, shard_id, sharding.num_shards)
             for pipe, shard_id in zip(pipes, sharding.shard_ids)}
    return DeviceBatches(pipes, devices, mesh_devices, sizes.pop(), sharding, reader_batch)


def pipeline_args(path: str, device, shard_id: int, num_shards: int, batch_size: int, training: bool,
                  config: DataConfig, seed: int) -> PipelineArgs:
    decoder = placement.decoder(config, device.platform)
    if decoder == "mixed" and device.platform != "gpu":
        raise UsageError("--decoder mixed decodes on the GPU, but this run has CPU devices; use --decoder cpu")
    return PipelineArgs(path=path, shard_id=shard_id, num_shards=num_shards, batch_size=batch_size,
                        training=training, on_gpu=decoder == "mixed", decoder=decoder, seed=seed,
                        num_classes=config.num_classes, image_size=config.image_size)


def epoch_size(pipe, name: str, shard_id: int, num_shards: int) -> int:
    """Samples in the split, from the pipeline's one reader, checked to shard and pad as the masks assume."""
    readers = pipe.reader_meta()
    if len(readers) != 1:
        raise UsageError(f"--pipeline {name} has {len(readers)} readers; use exactly one, given **args.reader_args()")
    meta = next(iter(readers.values()))
    if (meta["shard_id"], meta["number_of_shards"], meta["pad_last_batch"], meta["stick_to_shard"]) != \
            (shard_id, num_shards, 1, 1):
        raise UsageError(f"--pipeline {name}: its reader does not read shard {shard_id} of {num_shards} padded to "
                         f"whole batches; pass **args.reader_args() to it")
    return meta["epoch_size"]
