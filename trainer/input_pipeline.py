"""DALI pipelines: one per local device, each reading its own shard of the global data set.

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
- `labels`: integer class ids (shape () or (1,)), or float one-hot/soft targets (num_classes,).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import numpy as np
from nvidia.dali import backend, pipeline_def

from dali_launch.trainer import entry_points
from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.errors import UsageError

AXIS = "devices"  # the pmap axis name and the mesh axis name


@dataclass(frozen=True)
class PipelineArgs:
    """What a pipeline function receives: one device's view of one split."""
    path: str  # the split's folder: DATA_DIR/training or DATA_DIR/testing
    shard_id: int  # this device's shard of the split, of num_shards
    num_shards: int
    batch_size: int  # samples per DALI batch on this device (training: --batch-size x --steps-per-call)
    training: bool  # shuffle and augment; False: evaluation, every sample once
    on_gpu: bool  # the device is a GPU; outputs may stay on it
    decoder: str  # --decoder: auto, cpu or mixed; decode_device() resolves it
    seed: int  # the pipeline's seed, already used by DALI's random operators and shuffling
    num_classes: int  # --num-classes
    image_size: int  # --image-size: the side of square crops, for pipelines that crop

    def reader_args(self) -> dict:
        """Keyword arguments for the pipeline's one reader: this device's shard, padded to whole batches."""
        return {"shard_id": self.shard_id, "num_shards": self.num_shards, "random_shuffle": self.training,
                "pad_last_batch": True, "stick_to_shard": True}

    def decode_device(self, small_images: bool = False) -> str:
        """`device=` for fn.decoders.*: --decoder, where `auto` is nvJPEG on a GPU except for small images."""
        if self.decoder == "auto":
            return "mixed" if self.on_gpu and not small_images else "cpu"
        return self.decoder


def class_ids(labels, batch_dims: int = 1):
    """Integer class ids from either kind of labels the contract allows (numpy or jax arrays)."""
    return labels.argmax(-1) if labels.dtype.kind == "f" else labels.reshape(labels.shape[:batch_dims])


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
def graph(function, args: PipelineArgs, name: str):
    """The user's (or a built-in) pipeline function inside a DALI pipeline; `name` is its --pipeline."""
    outputs = function(args)
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 2:
        raise UsageError(f"--pipeline {name} returned {type(outputs).__name__}; return two DataNodes: images, labels")
    return tuple(outputs)


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
    if isinstance(tensor, backend.TensorGPU):
        return jax.dlpack.from_dlpack(tensor).copy()
    return jax.device_put(np.array(tensor), device)


def build(path: str, devices: list, mesh_devices: list, sharding: Sharding, batch_size: int, training: bool,
          config: DataConfig, seed: int, checkpoints: list[bytes] | None = None) -> DeviceBatches:
    """Pipelines for this process's devices, reading `sharding`'s shards; `mesh_devices` is the job's.

    `checkpoints` (one per local device, from `pipe.checkpoint()`) resume each reader where it was.
    """
    if checkpoints is not None and len(checkpoints) != len(devices):
        raise UsageError(f"the checkpoint holds {len(checkpoints)} DALI readers for this process but it has "
                         f"{len(devices)} devices; resume with the run's own --nodes/--gpus-per-node/--tasks-per-node")
    function, pipes = entry_points.load("pipeline", config.pipeline), []
    for k, (device, shard_id) in enumerate(zip(devices, sharding.shard_ids)):
        args = pipeline_args(path, device, shard_id, sharding.num_shards, batch_size, training, config, seed + shard_id)
        pipes.append(graph(
            function, args, config.pipeline, batch_size=batch_size, num_threads=config.reader_threads,
            device_id=device.local_hardware_id if args.on_gpu else None, seed=args.seed,
            prefetch_queue_depth=2, enable_checkpointing=True, checkpoint=checkpoints[k] if checkpoints else None))
    for pipe in pipes:
        pipe.build()
    sizes = {epoch_size(pipe, config.pipeline, shard_id, sharding.num_shards)
             for pipe, shard_id in zip(pipes, sharding.shard_ids)}
    return DeviceBatches(pipes, devices, mesh_devices, sizes.pop(), batch_size)


def pipeline_args(path: str, device, shard_id: int, num_shards: int, batch_size: int, training: bool,
                  config: DataConfig, seed: int) -> PipelineArgs:
    on_gpu = device.platform == "gpu"
    if config.decoder == "mixed" and not on_gpu:
        raise UsageError("--decoder mixed decodes on the GPU, but this run has CPU devices; use --decoder cpu")
    return PipelineArgs(path=path, shard_id=shard_id, num_shards=num_shards, batch_size=batch_size,
                        training=training, on_gpu=on_gpu, decoder=config.decoder, seed=seed,
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


def example(path: str, device, config: DataConfig) -> np.ndarray:
    """One zero sample shaped like the pipeline's images (batch of 1): what a model is initialised on.

    A throw-away evaluation pipeline reads one sample: the training pipelines may resume from a
    checkpoint that needs the initialised state first.
    """
    args = pipeline_args(path, device, 0, 1, 1, False, config, 0)
    pipe = graph(entry_points.load("pipeline", config.pipeline), args, config.pipeline, batch_size=1,
                 num_threads=1, device_id=device.local_hardware_id if args.on_gpu else None, seed=0)
    pipe.build()
    images = pipe.run()[0]
    images = np.array((images.as_cpu() if isinstance(images, backend.TensorListGPU) else images).as_tensor())
    del pipe
    return np.zeros(images.shape, images.dtype)
