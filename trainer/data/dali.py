"""DALI pipelines: one per reader of each local device, built from the pipeline function (contract.py says what
it is) for the shards shards.py names; data/batches.py runs them and joins their batches into job-wide arrays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nvidia.dali import pipeline_def

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import augment, decoded_cache, graph_check, native, registry
from dali_launch.trainer.data.batches import DeviceBatches, Readers
from dali_launch.trainer.data.contract import AUDIO_SETTINGS, OUTPUTS, RANDAUGMENT, PipelineArgs
from dali_launch.trainer.data.decided import DataPlan
from dali_launch.trainer.data.feed import Feed, pipeline_options, restored_iteration
from dali_launch.trainer.data.global_order import Layout, fingerprint
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


@dataclass(frozen=True)
class Split:
    """What a build reads: a split's folder, for training or evaluation, `call_batch` samples per device and device
    call (--steps-per-call steps of the per-device batch; each of a device's readers reads an equal part of it),
    the pipelines' seed (shard s's: seed + s), and the names of their outputs (the task's, in order)."""

    path: str
    training: bool
    call_batch: int
    seed: int = 0
    outputs: tuple[str, ...] = OUTPUTS


def _graph(function, args: PipelineArgs, name: str, outputs: tuple[str, ...] = OUTPUTS):
    """The user's (or a built-in) pipeline function inside a DALI pipeline; `name` is its --pipeline, `outputs`
    what its task takes from it."""
    outputs = graph_check.outputs_checked(function(args), name, outputs)
    augment.check_applied(args, name)
    return outputs


graph = pipeline_def(enable_conditionals=False)(_graph)
# --augment: auto_aug picks each sample's operations with DALI's `if` on data (conditionals)
augmented_graph = pipeline_def(enable_conditionals=True)(_graph)
augment.transpile_less()  # ...without rewriting the parts of auto_aug that do not branch on data


def build(split: Split, readers: Readers, data: DataPlan, checkpoints=None, start: Start | None = None):
    """Pipelines for this process's devices reading `readers`' shards of `split`, as DeviceBatches.

    `data`: the [data] settings and what the data plan decided (decided.py). `checkpoints` (one per pipeline, from `pipe.checkpoint()`;
    start_point.StartPoint.pipeline_states) resume each pipeline where it was (under a global order: its random
    operators; the feed starts at `start`'s call). `start`: training's.
    """
    sharding = readers.sharding
    if split.call_batch % sharding.readers:
        raise UsageError(
            f"--readers-per-device {sharding.readers} does not divide the {split.call_batch} samples a device "
            f"reads per call; use a divisor of it"
        )
    reader_batch, function = split.call_batch // sharding.readers, pipeline_function(data)
    native.check(function, data.settings.pipeline_params, split.outputs, data.pipeline)  # the launcher's, passed
    threads, shards_read = data.reader_threads * sharding.readers, (sharding.device_ids, sharding.global_devices)
    keep, kept = decoded_role(function, split, shards_read, data, threads)
    pipes, feeds, given = [], [], []
    for k, shard_id in enumerate(sharding.shard_ids):
        (local, reader), checkpoint = divmod(k, sharding.readers), checkpoints[k] if checkpoints else None
        feed = start.feed(sharding.first_device + local, reader, sharding.readers, checkpoint) if start else None
        args = pipeline_args(split, shard_id, sharding.num_shards, reader_batch, data, feed)
        args = dataclasses.replace(args, decoded_cache=keep)
        feeds.append(feed)
        given.append(args)
        pipes.append(make_pipeline(function, args, data, readers.devices[local], checkpoint, split.outputs))
    for pipe in pipes:
        pipe.build()
    sizes = {
        epoch_size(pipe, data.pipeline, shard_id, sharding.num_shards, feed)
        for pipe, shard_id, feed in zip(pipes, sharding.shard_ids, feeds)
    }
    batches = DeviceBatches(pipes, readers, sizes.pop(), reader_batch, start, split.outputs)
    batches.host_cache, batches.split = kept, split.path
    batches.left_out = tuple({scan.split: scan for args in given for scan in args.left_out}.values())
    if feeds[0]:
        batches.fingerprint = fingerprint(feeds[0].source.keys())
    return batches


def pipeline_function(data: DataPlan):
    """The pipeline function `data` was planned for: the run's, resolved once (entries.py), else its built-in."""
    return data.function or registry.load(data.pipeline)


def decoded_role(function, split: Split, devices: tuple, data: DataPlan, threads: int):
    """The training pipelines' `args.decode` role for the decided --decoded-cache, and the host table it reads
    (`devices`: (device ids, of how many), their shards filled here, once, by `threads` threads: the decoding
    every epoch would repeat), or (None, None)."""
    mb = data.cache_mb if split.training else 0
    if not mb or data.decoder != "cpu":
        return decoded_cache.role(mb, data.decoder, None), None
    # The fill keeps what is decoded, before any augmentation: none in its graph (no conditionals there).
    base = dataclasses.replace(pipeline_args(split, 0, 1, 1, data), augment="none")
    table = decoded_cache.fill(function, base, *devices, threads)
    return decoded_cache.role(mb, data.decoder, table), table


def make_pipeline(function, args: PipelineArgs, data: DataPlan, device, checkpoint, outputs=OUTPUTS):
    """One reader's pipeline, not built yet: on its device's GPU where it decodes there, its feed's workers
    (args.feed, --sample-order global) beside it; `outputs`: the names of what the function returns (the task's)."""
    return (augmented_graph if args.training and args.augment != "none" else graph)(
        function,
        args,
        data.pipeline,
        outputs,
        batch_size=args.batch_size,
        num_threads=data.reader_threads,
        device_id=device.local_hardware_id if args.on_gpu else None,
        seed=args.seed,
        prefetch_queue_depth=data.settings.prefetch,
        enable_checkpointing=True,
        checkpoint=checkpoint,
        **pipeline_options(args.feed),
    )


def pipeline_args(
    split: Split, shard_id: int, num_shards: int, reader_batch: int, data: DataPlan, feed: Feed | None = None
) -> PipelineArgs:
    """What a pipeline function reading shard `shard_id` of `split` is given: the [data] settings and the data
    plan's decisions (`data`: its decoder cpu or mixed, its output dtype)."""
    config = data.settings
    return PipelineArgs(
        path=split.path,
        shard_id=shard_id,
        num_shards=num_shards,
        batch_size=reader_batch,
        training=split.training,
        on_gpu=data.decoder == "mixed",
        decoder=data.decoder,
        seed=split.seed + shard_id,
        num_classes=config.num_classes,
        image_size=config.image_size,
        hw_decoder_load=config.hw_decoder_load,
        output_dtype=data.output_dtype,
        feed=feed,
        bad_samples=config.bad_samples,
        max_bad_samples=config.max_bad_samples,
        augment=config.augment,
        randaugment=config.randaugment_nm() if config.augment == "randaugment" else RANDAUGMENT,
        pipeline_params=config.pipeline_params,
        clip_frames=config.clip_frames,
        clip_stride=config.clip_stride,
        clip_window=config.clip_window,
        eval_clips=config.eval_clips,
        **audio_args(config),
    )


def audio_args(config: DataConfig) -> dict:
    """The audio settings a pipeline is given (PipelineArgs' fields of the same names)."""
    return {name: getattr(config, name) for name in AUDIO_SETTINGS}


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
