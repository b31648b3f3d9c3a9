"""DALI pipelines: one per reader of each local device, their batches joined into job-wide arrays.

A device's batch is its readers' batches end to end, reader after reader; shards.py says which
shard each reader reads and which positions are padding; contract.py what a pipeline function is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from nvidia.dali import backend, pipeline_def

from dali_launch.trainer import entry_points
from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import augment, bad_samples, decoded_cache, graph_check
from dali_launch.trainer.data.contract import OUTPUTS, RANDAUGMENT, PipelineArgs
from dali_launch.trainer.data.feed import Feed, pipeline_options, restored_iteration
from dali_launch.trainer.data.global_order import Layout, fingerprint
from dali_launch.trainer.data.hosting import ShardLayout
from dali_launch.trainer.data.rows import AXIS, first_row  # noqa: F401 - first_row: dali.first_row for its users
from dali_launch.trainer.data.shards import Sharding, steps_per_epoch
from dali_launch.trainer.errors import UsageError


@dataclass(frozen=True)
class Start:
    """Where training's pipelines start: --sample-order, and the call of an epoch (resumed runs: the
    checkpoint's; `offset` only for a global order resumed with another global batch)."""

    order: str  # shards or global
    seed: int
    devices: int  # the job's
    batch: int  # per device per step
    steps: int  # per call
    epoch: int = 0
    call: int = 0
    offset: int = 0
    first_global_batch: int = 0  # the run's first segment's (elastic.py's rescale rule); 0: this one's
    feed_workers: int = 0  # --feed-workers, resolved

    def layout(self, num_samples: int, readers: int) -> Layout:
        return Layout(num_samples, self.devices, self.batch, self.steps, readers)

    def feed(self, device: int, reader: int, readers: int, checkpoint: bytes | None = None) -> Feed | None:
        """Reader `reader` of `device`'s feed, for a pipeline built from `checkpoint` (or afresh)."""
        if self.order != "global":
            return None
        where = (self.epoch, self.call, self.offset, self.feed_workers, restored_iteration(checkpoint))
        return Feed(self.seed, self.devices, self.batch, self.steps, readers, device, reader, *where)


def _graph(function, args: PipelineArgs, name: str):
    """The user's (or a built-in) pipeline function inside a DALI pipeline; `name` is its --pipeline."""
    outputs = graph_check.outputs_checked(function(args), name)
    augment.check_applied(args, name)
    return outputs


graph = pipeline_def(enable_conditionals=False)(_graph)
# --augment: auto_aug picks each sample's operations with DALI's `if` on data (conditionals)
augmented_graph = pipeline_def(enable_conditionals=True)(_graph)
augment.transpile_less()  # ...without rewriting the parts of auto_aug that do not branch on data


class DeviceBatches:
    """Runs `readers` pipelines per local device and joins their outputs into one array per output name.

    The arrays are sharded over the job-wide device mesh (leading axis = device), the layout pmap
    and jit both take without a copy. DALI's own JAX iterator is not used: it stacks CPU outputs on
    one device and cannot shard across processes (see FIELD-NOTES).
    """

    names = OUTPUTS

    def __init__(
        self,
        pipes: list,
        devices: list,
        mesh_devices: list,
        num_samples: int,
        sharding: Sharding,
        reader_batch: int,
        start: Start | None = None,
    ):
        self.pipes, self.devices, self.num_samples, self.sharding = pipes, devices, num_samples, sharding
        self.reader_batch, self.start = reader_batch, start
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

    def first_sample(self) -> np.ndarray:
        """A zero batch of one sample shaped like the images, what a model is initialised on. Read
        from the next batch, which `next()` still returns: a pipeline of its own would cost a build."""
        images = self.peek()["images"]
        return np.zeros((1, *images.shape[2:]), images.dtype)

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


def calls_per_epoch(num_samples: int, sharding: Sharding, reader_batch: int, start: Start | None) -> int:
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

    GPU outputs stay on their GPU: DLPack views, then one program that copies (or concatenates) them.
    """
    tensors = [out.as_tensor() for out in outputs]
    if isinstance(tensors[0], backend.TensorGPU):
        return _copied(lead, *(jax.dlpack.from_dlpack(t) for t in tensors))
    host = np.array(tensors[0]) if len(tensors) == 1 else np.concatenate([np.asarray(t) for t in tensors])
    return jax.device_put(host[None] if lead else host, device)


@partial(jax.jit, static_argnums=0)
def _copied(lead: bool, *views):
    """DALI's device buffers copied into one of JAX's, with the leading axis where `lead` asks for it."""
    rows = jnp.concatenate(views) if len(views) > 1 else jnp.copy(views[0])  # a new buffer: DALI reuses its own
    return rows[None] if lead else rows


def build(
    path: str,
    devices: list,
    mesh_devices: list,
    sharding: Sharding,
    call_batch: int,
    training: bool,
    config: DataConfig,
    seed: int,
    checkpoints: list[bytes] | None = None,
    start: Start | None = None,
) -> DeviceBatches:
    """Pipelines for this process's devices, reading `sharding`'s shards; `mesh_devices` are the devices the
    batches' arrays span: the job's (training), or this process's own (evaluation sums its shards locally).

    `call_batch` is the samples per device and device call (--steps-per-call steps of the per-device
    batch); each of a device's readers reads an equal part of it, its `reader_batch`. `config` holds
    resolved values only (resolve.Resolved.data_config). `checkpoints` (one per pipeline, from
    `pipe.checkpoint()`; start_point.StartPoint.pipeline_states) resume each pipeline where it was
    (under a global order: its random operators; the feed starts at `start`'s call). `start`: training's.
    """
    if call_batch % sharding.readers:
        raise UsageError(
            f"--readers-per-device {sharding.readers} does not divide the {call_batch} samples a device "
            f"reads per call; use a divisor of it"
        )
    reader_batch, function = call_batch // sharding.readers, entry_points.load("pipeline", config.pipeline)
    threads, shards_read = config.reader_threads * sharding.readers, (sharding.device_ids, sharding.global_devices)
    keep, kept = decoded_role(function, path, shards_read, threads, training, config, seed)
    pipes, feeds, given = [], [], []
    for k, shard_id in enumerate(sharding.shard_ids):
        (local, reader), checkpoint = divmod(k, sharding.readers), checkpoints[k] if checkpoints else None
        feed = start.feed(sharding.first_device + local, reader, sharding.readers, checkpoint) if start else None
        args = pipeline_args(path, shard_id, sharding.num_shards, reader_batch, training, config, seed + shard_id, feed)
        args = dataclasses.replace(args, decoded_cache=keep)
        feeds.append(feed)
        given.append(args)
        pipes.append(make_pipeline(function, args, config, devices[local], checkpoint, feed))
    for pipe in pipes:
        pipe.build()
    sizes = {
        epoch_size(pipe, config.pipeline, shard_id, sharding.num_shards, feed)
        for pipe, shard_id, feed in zip(pipes, sharding.shard_ids, feeds)
    }
    batches = DeviceBatches(pipes, devices, mesh_devices, sizes.pop(), sharding, reader_batch, start)
    batches.host_cache = kept
    batches.split = path
    batches.left_out = tuple({scan.split: scan for args in given for scan in args.left_out}.values())
    if feeds[0]:
        batches.fingerprint = fingerprint(feeds[0].source.keys())
    return batches


def decoded_role(function, path: str, devices: tuple, threads: int, training: bool, config: DataConfig, seed: int):
    """The training pipelines' `args.decode` role for the resolved --decoded-cache, and the host table it
    reads (`devices`: (device ids, of how many), their shards filled here, once, by `threads` threads:
    the decoding every epoch would repeat), or (None, None)."""
    mb = config.decoded_cache_mb() if training else 0
    if not mb or config.decoder != "cpu":
        return decoded_cache.role(mb, config.decoder, None), None
    # The fill keeps what is decoded, before any augmentation: none in its graph (no conditionals there).
    base = dataclasses.replace(pipeline_args(path, 0, 1, 1, True, config, seed), augment="none")
    table = decoded_cache.fill(function, base, *devices, threads)
    return decoded_cache.role(mb, config.decoder, table), table


def make_pipeline(
    function, args: PipelineArgs, config: DataConfig, device, checkpoint: bytes | None, feed: Feed | None
):
    """One reader's pipeline, not built yet: on its device's GPU where it decodes there."""
    return (augmented_graph if args.training and args.augment != "none" else graph)(
        function,
        args,
        config.pipeline,
        batch_size=args.batch_size,
        num_threads=config.reader_threads,
        device_id=device.local_hardware_id if args.on_gpu else None,
        seed=args.seed,
        prefetch_queue_depth=config.prefetch,
        enable_checkpointing=True,
        checkpoint=checkpoint,
        **pipeline_options(feed),
    )


def pipeline_args(
    path: str,
    shard_id: int,
    num_shards: int,
    reader_batch: int,
    training: bool,
    config: DataConfig,
    seed: int,
    feed: Feed | None = None,
) -> PipelineArgs:
    """What a pipeline function is given; `config` holds resolved values (its decoder cpu or mixed)."""
    return PipelineArgs(
        path=path,
        shard_id=shard_id,
        num_shards=num_shards,
        batch_size=reader_batch,
        training=training,
        on_gpu=config.decoder == "mixed",
        decoder=config.decoder,
        seed=seed,
        num_classes=config.num_classes,
        image_size=config.image_size,
        hw_decoder_load=config.hw_decoder_load,
        output_dtype=config.output_dtype,
        feed=feed,
        bad_samples=config.bad_samples,
        max_bad_samples=config.max_bad_samples,
        augment=config.augment,
        randaugment=config.randaugment_nm() if config.augment == "randaugment" else RANDAUGMENT,
    )


def epoch_size(pipe, name: str, shard_id: int, num_shards: int, feed: Feed | None = None) -> int:
    """Samples in the split, from the pipeline's one reader, checked to shard and pad as the masks assume
    (under a global order: from its feed's records, with no native reader beside it)."""
    readers = pipe.reader_meta()
    if feed is not None:
        graph_check.read_checked(len(readers), feed.source is not None, name)
        return len(feed.source)
    graph_check.readers_checked(len(readers), name)
    meta = next(iter(readers.values()))
    given = {key: meta["number_of_shards" if key == "num_shards" else key] for key in graph_check.SHARDING}
    expected = {"shard_id": shard_id, "num_shards": num_shards, "pad_last_batch": True, "stick_to_shard": True}
    graph_check.sharding_checked(given, expected, name)  # the launcher's check, on the graph, passed it
    return meta["epoch_size"]
