"""The pure checks of a run's settings, run before anything is written, submitted or started."""

from __future__ import annotations

import math
from pathlib import Path

from dali_launch.launcher.route import audio_checks, recipe_checks
from dali_launch.launcher.run_config import RunConfig, counted, node_range
from dali_launch.trainer.config import DataConfig, ObserveConfig, OptimizerConfig, ResilienceConfig
from dali_launch.trainer.data import formats, native
from dali_launch.trainer.data.bad_samples import check_limit, check_mode
from dali_launch.trainer.data.registry import pipelines
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan import data as plan_data
from dali_launch.trainer.plan import step as plan_step
from dali_launch.trainer.plan.step import most_steps_per_call
from dali_launch.trainer.settings.eval import EVAL_CPU_BATCH
from dali_launch.trainer.topology import resolve_platform


def device_phrase(run: RunConfig) -> str:
    low, high = run.node_range
    counts = run.device_counts
    devices = counted(counts[-1], "device") if low == high else f"{counts[0]}-{counts[-1]} devices"
    nodes = counted(high, "node") if low == high else f"{low}-{high} nodes"
    return f"{devices} ({nodes} × {counted(run.devices_per_node, 'GPU')})"


def validate(run: RunConfig) -> None:
    """Raises UsageError with the fix for the first bad value; never changes anything."""
    launch, step = run.launch, run.step
    node_range(launch.nodes)  # a bad --nodes is refused first: everything below counts with it
    _positive(
        epochs=step.epochs,
        batch_size=step.batch_size,
        sync_every_steps=step.sync_every_steps,
        prefetch=run.data.prefetch,
        num_classes=run.data.num_classes,
        image_size=run.data.image_size,
        init_timeout_s=run.distributed.init_timeout_s,
        barrier_timeout_s=run.distributed.barrier_timeout_s,
        local_timeout_s=launch.local_timeout_s,
        heartbeat_timeout_s=run.distributed.heartbeat_timeout_s,
        keep_checkpoints=run.resilience.keep_checkpoints,
        accumulate_steps=run.optimizer.accumulate_steps,
    )
    _resilience(run.resilience)
    if step.steps_per_call < 0:
        raise UsageError(f"--steps-per-call {step.steps_per_call} must be 0 (auto) or more")
    if run.data.reader_threads < 0:
        raise UsageError(f"--reader-threads {run.data.reader_threads} must be 0 (auto) or more")
    if run.data.feed_workers < -1:
        raise UsageError(f"--feed-workers {run.data.feed_workers} must be -1 (auto), 0 (in-process) or more")
    _decoded_cache(run.data, bool(launch.resume))
    if not 0 <= run.data.hw_decoder_load <= 1:
        raise UsageError(f"--hw-decoder-load {run.data.hw_decoder_load} is out of range; use a value in [0, 1]")
    _observe(run.observe, run.node_range[0] * run.tasks_per_node)  # ranks that exist at any count
    _optimizer(run)
    audio_checks.validate(run)  # before the image recipe's: --pipeline audio's own words for what it cannot take
    recipe_checks.validate(run)
    if launch.gpus_per_node is not None and launch.gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node {launch.gpus_per_node} must be at least 1")
    if launch.tasks_per_node is not None and launch.tasks_per_node < 1:  # 0 must not fall back to 1
        raise UsageError(f"--tasks-per-node {launch.tasks_per_node} must be at least 1")
    gpus, tasks = run.devices_per_node, run.tasks_per_node
    if tasks < 1 or gpus % tasks:
        fix = (
            f"or {gpus} (one task per GPU)"
            if gpus > 1
            else f"on its one GPU, or --gpus-per-node {tasks} (one task per GPU)"
        )
        raise UsageError(
            f"--tasks-per-node {tasks} does not divide --gpus-per-node {gpus}; use 1 (one task per node) {fix}"
        )
    _global_batch(run)
    _readers(run)
    plan_step.check(run.step, run.model.model, run.device_counts, run.devices_per_node)  # the task's own rules
    if run.eval.eval_cache_mb < 0:
        raise UsageError(f"--eval-cache-mb {run.eval.eval_cache_mb} must be 0 (no cache) or more")
    if not 0 < run.optimizer.learning_rate < math.inf:  # a rate that diverges is found while training (--on-nan)
        raise UsageError(f"--learning-rate {run.optimizer.learning_rate} is out of range; use a finite value above 0")
    if not 0 <= run.optimizer.momentum < 1:
        raise UsageError(f"--momentum {run.optimizer.momentum} is out of range; use a value in [0, 1)")
    if step.seed < 0:  # DALI takes a negative seed as "pick one at random": runs would not repeat
        raise UsageError(f"--seed {step.seed} must be 0 or more")
    _data(run.data)
    if run.data.decoder == "mixed" and run.distributed.platform == "cpu":
        raise UsageError("--decoder mixed decodes on the GPU but --platform is cpu; use --decoder cpu")


def batch_within(run: RunConfig, samples: int, split: Path) -> None:
    """A global batch larger than one step that holds the whole training set (`samples`, of `split`, padded to the
    devices) refused: every epoch would be one step of padding after a whole start-up. Each device count the job
    may start with; a batch that is the whole set (its padding only the devices') trains."""
    for devices in run.device_counts:
        per_device, whole = run.step.per_device_batch(devices), math.ceil(samples / devices)
        if per_device <= whole:
            continue
        if run.step.global_batch_size:
            given, fix = f"--global-batch-size {devices * per_device}", f"--global-batch-size {devices * whole}"
        else:
            given = f"--batch-size {per_device} on {counted(devices, 'device')} (a global batch of {devices * per_device:,})"
            fix = f"--batch-size {whole}"
        raise UsageError(
            f"{given} is larger than the {samples:,} training samples of {split}; use {fix} or less, or a larger "
            f"data set"
        )


def profile_within(run: RunConfig, samples: int) -> None:
    """--profile-steps past the run's last SGD step, refused here where the data's `samples` are known: by
    the most steps an epoch can take (the task knows them exactly, once its steps per call and readers are
    resolved, and refuses a range this lets through: trainer/observe/profile.py)."""
    steps = run.observe.profile_range()
    if steps is None:
        return
    devices = run.device_counts[0]  # the fewest devices: the most steps
    k = most_steps_per_call(run.step.steps_per_call, resolve_platform(run.distributed.platform))
    # a shard is padded to whole reader batches and an epoch to whole calls: at most 2k steps more than
    # the samples' (a device's readers divide its call's k batches)
    epochs, whole = run.step.epochs, samples // (devices * run.step.per_device_batch(devices))
    most, least = epochs * (whole + 2 * k + 1), epochs * max(whole, 1)  # `least`: steps every run of it takes
    if steps[0] >= most:
        raise UsageError(
            f"--profile-steps {run.observe.profile_steps} starts past the run's last SGD step "
            f"({counted(epochs, 'epoch')} of {samples} samples over {counted(devices, 'device')} take fewer than "
            f"{most} steps); trace steps below that, e.g. --profile-steps {max(0, least - 10)}:{least}"
        )


def _data(data: DataConfig) -> None:
    """--bad-samples and its limit; --sample-order for the pipeline's format; --pipeline-params written
    NAME=ROLE,..., and not for a built-in pipeline, which has no parameters of DALI's kind to fill (one of the
    user's is checked against its function in the pre-flight: trainer/data/native.py)."""
    check_limit(data.max_bad_samples)
    check_mode(data.bad_samples, data.pipeline)
    formats.check_order(data.pipeline, data.sample_order)
    if native.parsed(data.pipeline_params) and data.pipeline in pipelines():
        raise UsageError(
            f"--pipeline-params fills the parameters of DALI's own pipeline functions, and --pipeline {data.pipeline} "
            f"is built in; leave --pipeline-params out"
        )


def _decoded_cache(data: DataConfig, resumed: bool) -> None:
    try:
        size = data.decoded_cache_mb()
    except ValueError:
        raise UsageError(
            f"--decoded-cache {data.decoded_cache} is no size; use auto, off, or MiB above 0 like 4096, 512M or 12G"
        ) from None
    found = formats.get(data.pipeline)
    if size and found is not None and not found.decodes:
        raise UsageError(
            f"--decoded-cache {data.decoded_cache} keeps what args.decode(...) decodes, and --pipeline {data.pipeline} "
            f"decodes its samples itself; leave --decoded-cache out (auto: off there)"
        )
    if size and data.sample_order == "global" and not resumed:  # a resumed run's own: an earlier version let it be
        raise UsageError(
            f"--decoded-cache {data.decoded_cache} keeps each reader's decoded shard, but --sample-order global "
            f"reads through an external source, which has none; leave --decoded-cache out (auto: off there), or "
            f"use --sample-order shards"
        )


def _optimizer(run: RunConfig) -> None:
    """The optimizer, schedule and regularisation flags (trainer/step/optim.py)."""
    train = run.optimizer
    fractions = {"weight_decay": train.weight_decay, "label_smoothing": run.task.label_smoothing}
    for name, value in {**fractions, "ema_decay": train.ema_decay}.items():
        if not 0 <= value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value} is out of range; use a value in [0, 1)")
    if not train.clip_norm >= 0:
        raise UsageError(f"--clip-norm {train.clip_norm} must be 0 (no clipping) or more")
    if not 0 < train.decay_factor <= 1:
        raise UsageError(f"--decay-factor {train.decay_factor} is out of range; use a value in (0, 1]")
    if train.warmup_steps < 0 or not train.warmup_epochs >= 0:
        raise UsageError(
            f"--warmup-epochs {train.warmup_epochs} and --warmup-steps {train.warmup_steps} must be 0 or more"
        )
    if train.warmup_steps and train.warmup_epochs:
        raise UsageError("--warmup-epochs and --warmup-steps both given; use one of them")
    if train.warmup_epochs >= run.step.epochs and train.schedule != "constant":
        raise UsageError(
            f"--warmup-epochs {train.warmup_epochs} leaves nothing of --epochs {run.step.epochs} for "
            f"--schedule {train.schedule}; warm up for fewer epochs"
        )
    if run.eval.eval_ema and not train.ema_decay:
        raise UsageError(
            "--eval-ema evaluates the parameters' average, but --ema-decay is 0 (none kept); "
            "give --ema-decay, e.g. 0.999"
        )
    _decay_epochs(train)


def _decay_epochs(train: OptimizerConfig) -> None:
    try:
        epochs = train.decay_epoch_list()
    except ValueError:
        epochs = None
    if epochs is None or any(e < 1 for e in epochs) or epochs != sorted(set(epochs)):
        raise UsageError(f"--decay-epochs {train.decay_epochs!r} is not a rising list of epochs; write e.g. 30,60,80")
    if train.schedule == "step" and not epochs:
        raise UsageError("--schedule step needs --decay-epochs, e.g. --decay-epochs 30,60,80")
    if epochs and train.schedule != "step":
        raise UsageError(
            f"--decay-epochs is for --schedule step, not {train.schedule}; leave it out or use --schedule step"
        )


def _global_batch(run: RunConfig) -> None:
    """The global batch splits evenly over the job's devices: over every count a node range allows,
    since SLURM picks one at each start (the first too). Without --global-batch-size a range keeps the
    per-device --batch-size, which only --elastic-batch rescale can carry over to another count."""
    gbs, counts = run.step.global_batch_size, run.device_counts
    if run.nodes_vary:
        _node_range(run)
    if gbs is None:
        return
    uneven = [d for d in counts if gbs % d]
    if gbs >= 1 and not uneven:
        return
    if gbs < 1 or not run.nodes_vary:
        raise UsageError(
            f"--global-batch-size {gbs} is not divisible by {device_phrase(run)}; use a multiple of {counts[0]}"
        )
    raise UsageError(
        f"--global-batch-size {gbs} cannot be split over {', '.join(map(str, uneven))} of the "
        f"{device_phrase(run)} SLURM may give; use a multiple of {math.lcm(*counts)} (divisible by "
        f"{', '.join(map(str, counts))} devices), or narrow --nodes"
    )


def _node_range(run: RunConfig) -> None:
    """A node range needs a batch rule for every count (either sample order continues on any count)."""
    if run.step.global_batch_size is None and run.step.elastic_batch == "keep":
        counts = run.device_counts
        raise UsageError(
            f"--nodes {run.launch.nodes} with --elastic-batch keep needs a --global-batch-size, a multiple of "
            f"{math.lcm(*counts)} so that {_either(counts)} devices split it evenly; give one, "
            f"or add --elastic-batch rescale (keeps the per-device --batch-size)"
        )


def _either(counts: list[int]) -> str:
    """1 or 2; 8, 16 or 24."""
    if len(counts) == 1:
        return str(counts[0])
    return f"{', '.join(map(str, counts[:-1]))} or {counts[-1]}"


def _readers(run: RunConfig) -> None:
    """Each of a device's readers reads an equal part of its batches: the count must divide them, at every device
    count a node range allows (the data plan's rule, plan/data.py)."""
    readers, step, eval_batch = run.data.readers_per_device, run.step, run.eval.eval_batch_size
    if eval_batch < 0:
        raise UsageError(f"--eval-batch-size {eval_batch} must be 0 (auto) or more")
    for devices in run.device_counts:
        # auto is training's batch on GPUs (divided below where given) and EVAL_CPU_BATCH on CPUs
        batches = {"--eval-batch-size": eval_batch or EVAL_CPU_BATCH}
        if step.steps_per_call:  # auto picks a step count the readers divide (plan/step.py)
            call = step.per_device_batch(devices) * step.steps_per_call
            batches = {"the training batch per device and call (batch × --steps-per-call)": call, **batches}
        plan_data.check_readers(readers, batches)


def _resilience(r: ResilienceConfig) -> None:
    if r.checkpoint_every_steps < 0:
        raise UsageError(f"--checkpoint-every-steps {r.checkpoint_every_steps} must be 0 (epoch ends only) or more")
    if r.checkpoint_every_min < 0:
        raise UsageError(f"--checkpoint-every-min {r.checkpoint_every_min} must be 0 (not by time) or more")
    if r.max_requeues < 0:
        raise UsageError(f"--max-requeues {r.max_requeues} must be 0 or more")
    if r.watchdog_s < 10:
        raise UsageError(
            f"--watchdog-s {r.watchdog_s} is too short to tell a stopped rank from a busy one; use 10 or more"
        )


def _observe(o: ObserveConfig, num_processes: int) -> None:
    if o.log_every_steps < 0:
        raise UsageError(f"--log-every-steps {o.log_every_steps} must be 0 (epoch scalars only) or more")
    try:
        o.profile_range()
    except ValueError:
        raise UsageError(
            f"--profile-steps {o.profile_steps} is not A:B with 0 <= A < B (global SGD steps, B "
            f"excluded); e.g. --profile-steps 100:110"
        ) from None
    try:
        o.ranks_to_profile()
    except ValueError:
        raise UsageError(
            f"--profile-ranks {o.profile_ranks} is not a comma-separated list of ranks; e.g. 0 or 0,1"
        ) from None
    if max(o.ranks_to_profile()) >= num_processes:
        raise UsageError(
            f"--profile-ranks {o.profile_ranks} names a rank the job does not have (ranks 0.."
            f"{num_processes - 1}); use ranks below {num_processes}"
        )
    if o.wandb_project is not None:
        import importlib.util

        if not o.wandb_project.strip():
            raise UsageError("--wandb-project is empty; name a W&B project, or leave the flag out")
        if importlib.util.find_spec("wandb") is None:
            raise UsageError(
                f"--wandb-project {o.wandb_project} needs the wandb package; "
                f"pip install 'dali-launch[wandb]', or leave --wandb-project out"
            )


def _positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value} must be at least 1")
