"""The task spec: plain, frozen, JSON-serialisable dataclasses that the launcher fills and each task reads.

This module imports nothing heavy so the launcher can build flags from it instantly. Each field's
`help` metadata is its command-line help; derived values (per-device batch, shard ids) are
methods or functions elsewhere, never fields.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path


def opt(default, help: str, **meta):
    """A config field whose metadata doubles as its CLI flag (`choices`, `flag` may be given).

    `on_resume` says what `--resume` lets a flag given beside it do to the run's own value (the launcher
    reads it, launcher/route/resume.py): "may change" (how long or how it runs, never what it computes) or
    "elastic" (where it runs: another topology, either sample order); without it a different value is refused,
    the checkpoint would continue another run. `path=True`: a path, compared (and written) as an absolute one."""
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class DataConfig:
    data_dir: str | None = opt(
        None,
        "Folder holding training/ and testing/ in the pipeline's format: Caffe2 LMDBs for mnist (the layout "
        "of DALI_extra's db/MNIST), JPEG class folders for folders, shards with DALI indexes for tfrecord and "
        "webdataset (`dali-launch data synth` writes each). "
        "Default (mnist and own pipelines): $DALI_EXTRA_PATH/db/MNIST if set, else the embedded MNIST sample.",
        path=True,
    )
    pipeline: str = opt(
        "mnist",
        "Input pipeline: mnist (the example's, Caffe2 LMDB), folders (JPEG class folders: random resized "
        "crop, flip, normalize), tfrecord (tf.Example shards) and webdataset (tar shards), both with the folders "
        "augmentation, or package.module:function of your own (see README).",
    )
    num_classes: int = opt(10, "Classes in the data set: the model's output width and the one-hot depth.")
    image_size: int = opt(
        224, "Side in pixels of the square crops the folders, tfrecord and webdataset pipelines feed the model."
    )
    reader_threads: int = opt(
        0,
        "DALI CPU threads per pipeline (per reader). 0: auto (pipelines that decode on the CPU: 2, and more "
        "readers instead; on the GPU (nvJPEG): the cores this process has per device, at most 8).",
        on_resume="may change",
    )
    readers_per_device: int = opt(
        0,
        "DALI pipelines per device, each reading its own part of the device's shard (one Caffe2 reader is a "
        "serial bottleneck). 0: auto (CPU devices: 1; GPUs: the most of 8, 4, 2, 1 that divides the device's "
        "batch and whose --reader-threads fit the cores this process has per device).",
        on_resume="elastic",
    )
    prefetch: int = opt(
        4,
        "Batches each DALI pipeline prepares ahead of the trainer (prefetch_queue_depth): "
        "a deeper queue rides out uneven batch times.",
        on_resume="may change",
    )
    sample_order: str = opt(
        "shards",
        "Order of training samples: shards (each device's DALI reader shuffles its own shard; the fastest) or "
        "global (one permutation per epoch from --seed alone, read through an external source). Either resumes "
        "on another topology mid-epoch, each sample once per epoch; global keeps the same steps on any device "
        "count, shards the same within the interrupted epoch (docs/resilience.md, Elastic resume).",
        choices=("shards", "global"),
    )
    feed_workers: int = opt(
        -1,
        "--sample-order global: DALI worker processes per pipeline that read its records (a parallel external "
        "source), off the training process's GIL. 0: read in the training process; -1: auto (the cores per "
        "device that --reader-threads leave, at most 4; 0 where none are left).",
        on_resume="may change",
    )
    decoder: str = opt(
        "auto",
        "Where JPEGs are decoded, and so where DALI runs: cpu (the whole pipeline on the "
        "CPU; JAX copies batches to the devices), mixed (nvJPEG; the pipeline on the GPU), or auto: "
        "cpu on CPU devices; on GPUs each pipeline picks (mnist: cpu, faster for 28x28 images; "
        "folders and your own: mixed).",
        choices=("auto", "cpu", "mixed"),
    )
    hw_decoder_load: float = opt(
        0.35,
        "--decoder mixed: the share of each batch's JPEGs given to the GPU's hardware JPEG decoder (A100/H100/"
        "H200), the rest to nvJPEG's CUDA decoder. 0.35 trained ResNet-50 fastest on an H200 (0.9: 8 % slower, "
        "README); DALI's own default is 0.65.",
    )
    bad_samples: str = opt(
        "stop",
        "An image DALI cannot decode (not an image, truncated: found from headers before training, once per data "
        "set): stop (one line naming it) or skip (left out of the reader, listed in RUN/bad_samples.jsonl; every "
        "other sample still once an epoch). Folders, TFRecord, WebDataset, and pipelines of your own that read "
        "through args.read; a Caffe2 LMDB only stops.",
        choices=("stop", "skip"),
    )
    max_bad_samples: str = opt(
        "0.001",
        "--bad-samples skip: stop anyway past this many bad samples in a split: a fraction of it (below 1) or a count.",
    )
    output_dtype: str = opt(
        "auto",
        "What the built-in image pipelines hand the model: float32, float16 (half the bytes; DALI has no "
        "bfloat16), or auto: float16 with --precision bf16, which computes in bf16 anyway, else float32.",
        choices=("auto", "float32", "float16"),
    )
    # Today's vision recipes (issue 31): augmentation on the DALI side (data/augment.py).
    augment: str = opt(
        "none",
        "Training augmentation after the crop and flip, in DALI (on the GPU with --decoder mixed), from "
        "nvidia.dali.auto_aug: randaugment (--randaugment N,M), trivialaugment (TrivialAugment Wide), "
        "autoaugment (AutoAugment's ImageNet policy), or none. Image pipelines only; evaluation is never augmented.",
        choices=("none", "randaugment", "trivialaugment", "autoaugment"),
    )
    randaugment: str = opt(
        "2,9",
        "--augment randaugment: N,M: N operations per image at magnitude M (0..30), as timm's rand-m9-n2.",
    )

    def randaugment_nm(self) -> tuple[int, int]:
        """--randaugment as (N, M); ValueError when it is not two integers."""
        n, m = (int(part) for part in self.randaugment.replace(" ", "").split(","))
        return n, m

    decoded_cache: str = opt(
        "auto",
        "Decode each training sample once and keep it decoded (before augmentation): with nvJPEG in DALI's decoder "
        "cache on the GPU (SIZE: MiB per device; cached until full), on the CPU in host memory (SIZE: MiB this "
        "process may fill; on only when the decoded shards fit). auto: on where the decoded split fits in what "
        "that memory leaves (GPU: outside XLA's pool; host: a quarter of what is available), else off; off; or "
        "SIZE (4096, 512M, 12G). The same samples in the same order; needs a pipeline that decodes through "
        "args.decode (the built-in ones do); not under --sample-order global. The start-up line says what it chose.",
    )

    def decoded_cache_mb(self) -> int | None:
        """--decoded-cache as MiB: None for auto, 0 for off; ValueError for anything else than SIZE."""
        value = self.decoded_cache.strip().upper()
        if value in ("AUTO", "OFF"):
            return None if value == "AUTO" else 0
        scale = {"M": 1, "G": 1024}.get(value[-1:], None)
        mb = int(value[:-1] if scale else value) * (scale or 1)
        if mb <= 0:
            raise ValueError(self.decoded_cache)
        return mb


@dataclass(frozen=True)
class TrainConfig:
    model: str = opt(
        "mlp",
        "Model: mlp (the example's 784-784-1024-1024-10 MLP), cnn (small, 28x28 images), cnn-nnx (its "
        "Flax NNX twin), resnet18 (GroupNorm), resnet50 (v1.5, BatchNorm), vit-ti16, vit-s16, vit-b16 "
        "(big_vision's ViTs, 16x16 patches), or package.module:factory of your own, Linen or NNX (see docs/models.md).",
    )
    epochs: int = opt(5, "Training epochs.", on_resume="may change")
    batch_size: int = opt(50, "Samples per device per step (the example's 50).")
    global_batch_size: int | None = opt(
        None, "Samples per step over all devices; overrides --batch-size and must divide by the device count."
    )
    steps_per_call: int = opt(
        0,
        "SGD steps fused into one device call: DALI reads this many batches at once and the device loops "
        "over them (lax.scan). The steps stay those of --batch-size; only host dispatch gets cheaper. "
        "0: auto: on GPUs about 1,200 samples per device and call (24 steps of the example's 50), at most 64; "
        "on CPUs 1. The value used is in rank_map.json and the first log lines.",
    )
    parallel: str = opt(
        "auto",
        "How steps run on the devices: sharded (one jit program over a job-wide device mesh; XLA "
        "partitions it and inserts the all-reduce) or pmap (one replica per device, gradients summed by psum; "
        "BatchNorm normalises each device's own rows). The same SGD steps. auto: pmap for a model with "
        "BatchNorm statistics on more than one device (7 % faster for ResNet-50 on 2 H200s), else sharded.",
        choices=("auto", "sharded", "pmap"),
    )
    # The optimizer and its schedule (step/optim.py); the defaults are the example's SGD.
    optimizer: str = opt(
        "sgd",
        "sgd (with --momentum; 0: plain SGD), nesterov (SGD with Nesterov momentum), adamw, lamb, or lars "
        "(LARS with --momentum). Through optax.",
        choices=("sgd", "nesterov", "adamw", "lamb", "lars"),
    )
    learning_rate: float = opt(0.1, "Peak learning rate (after warm-up).")
    momentum: float = opt(0.9, "Momentum of sgd, nesterov and lars (adamw and lamb: optax's b1 0.9, b2 0.999).")
    schedule: str = opt(
        "constant",
        "Learning-rate schedule after the warm-up: constant, cosine (to 0 at the end of training), linear "
        "(to 0 at the end), or step (times --decay-factor at each of --decay-epochs).",
        choices=("constant", "cosine", "linear", "step"),
    )
    warmup_epochs: float = opt(
        0.0, "Linear warm-up from 0 to --learning-rate over this many epochs (may be a fraction)."
    )
    warmup_steps: int = opt(0, "Linear warm-up over this many optimizer steps instead of --warmup-epochs.")
    decay_epochs: str = opt(
        "",
        "--schedule step: the epochs at which the rate is multiplied by --decay-factor, "
        "comma-separated, e.g. 30,60,80.",
    )
    decay_factor: float = opt(0.1, "--schedule step: the factor applied at each of --decay-epochs.")
    weight_decay: float = opt(
        0.0,
        "Weight decay of kernels (parameters of 2 or more dimensions; biases and normalisation scales are "
        "left alone): added to the gradient for sgd/nesterov/lars, decoupled for adamw/lamb.",
    )
    label_smoothing: float = opt(0.0, "Label smoothing: the one-hot targets mixed with this much of a uniform one.")
    clip_norm: float = opt(0.0, "Clip the job-wide gradient to this global norm (0: no clipping).")
    accumulate_steps: int = opt(
        1,
        "Accumulate gradients over this many steps of --batch-size before one optimizer update: exactly one "
        "step of a batch this many times larger (the loss stays the mean over every real sample).",
    )
    ema_decay: float = opt(
        0.0,
        "Keep an exponential moving average of the parameters (and BatchNorm statistics) "
        "with this decay per optimizer update, e.g. 0.999 (0: none).",
    )
    eval_ema: bool = opt(False, "Evaluate the --ema-decay average instead of the trained parameters.")
    on_nan: str = opt(
        "stop",
        "A training loss that is not finite (NaN, Inf: the run diverged), found at the loop's check points with no "
        "extra device sync: stop (every rank, one line naming the steps and the last good checkpoint, which "
        "is kept) or skip-step (drop each such update and count it).",
        choices=("stop", "skip-step"),
        on_resume="may change",
    )
    precision: str = opt(
        "fp32",
        "Compute precision: fp32, or bf16 (the model's forward and backward pass in bfloat16; parameters, "
        "gradients and optimizer state stay float32).",
        choices=("fp32", "bf16"),
    )
    seed: int = opt(0, "Seed for parameters and data shuffling.")
    elastic_batch: str = opt(
        "keep",
        "Runs resumed on another device count: keep the global batch (the per-device "
        "batch changes; it must divide) or rescale (keep the per-device batch; the learning rate is scaled by "
        "new global batch / the run's first, the linear scaling rule).",
        choices=("keep", "rescale"),
        on_resume="elastic",
    )
    eval_batch_size: int = opt(
        500, "Test samples per device per evaluation step, at most: smaller test shards take one step of their size."
    )
    eval_on: str = opt(
        "all",
        "Which devices evaluate: all (every device of every process reads its shard of the test set; the "
        "counts are summed once and process 0 reports) or process-0 (process 0's devices alone, the others "
        "wait: with one task per GPU that is 1 of N GPUs).",
        choices=("all", "process-0"),
        on_resume="may change",
    )
    eval_cache_mb: int = opt(
        1024,
        "Keep the decoded test set on the devices after the first evaluation when it takes at most this "
        "many MiB per device; later evaluations skip DALI. 0: read it through DALI every time.",
        on_resume="may change",
    )
    sync_every_steps: int = opt(
        10,
        "Wait for the device at least every N steps (bounds queued work; gloo on CPU deadlocks without it).",
        on_resume="may change",
    )
    deterministic: bool = opt(
        False,
        "Reproducible GPU runs: XLA's deterministic GPU kernels (no atomics in reductions, deterministic "
        "convolutions, no autotuning), so the same run twice, and a resumed run against one never interrupted "
        "(same GPUs and layout), end with the same parameters bit for bit. ResNet-50 ran 28 % slower with it on "
        "an H200. CPU runs need nothing. Recorded in rank_map.json (docs/resilience.md).",
        on_resume="may change",
    )
    cuda_graphs: str = opt(
        "auto",
        "Let XLA run programs as CUDA graphs (its command buffers; fused steps ran 2.5x faster on an H200): "
        "on, off, or auto: on while DALI runs on the CPU (--decoder), off when it also works on the GPU, whose "
        "CUDA calls can break a graph capture (one run died with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).",
        choices=("auto", "on", "off"),
        on_resume="may change",
    )
    xla_options: str = opt(
        "auto",
        "XLA's own settings for every program of the task, as XLA_FLAGS names them without dashes: space-separated "
        "NAME=VALUE, e.g. 'xla_gpu_autotune_level=2 xla_gpu_enable_latency_hiding_scheduler=true'. auto: the ones "
        "measured fastest on an H200 (trainer/step/xla_options.py) on GPUs, none on CPUs; none: XLA's defaults.",
        on_resume="may change",
    )
    batchnorm_stats: str = opt(
        "auto",
        "Precision of BatchNorm's batch statistics (mean, variance) in a model whose factory takes `batchnorm_stats` (the "
        "built-in resnet50): float32 (Flax's default, stable in bf16 training), compute (the --precision dtype: "
        "fewer bytes moved), or auto (resolve.py: float32 until benchmarks/step_levers.py says otherwise).",
        choices=("auto", "float32", "compute"),
    )
    compile_cache: str = opt(
        "",
        "Folder where the runs share XLA's compiled programs (the persistent compilation cache): requeued, "
        "resumed and repeated runs skip compiling. Default: RUN_ROOT/.compile-cache, shared by every run of the "
        "run root; each run compiles into RUN_DIR/compile-cache and publishes there whole files only, so runs "
        "that write at once do no harm. off: no cache.",
        on_resume="may change",
    )
    record_samples: bool = opt(
        False, "Debug: write a fingerprint of every training sample seen, per epoch and rank.", on_resume="may change"
    )
    # Today's vision recipes (issue 31): ViTs (model/vit.py), mixing (step/mixing.py), fine-tuning (model/init_from.py).
    mixup: float = opt(
        0.0,
        "Mixup's alpha: each device's batch is mixed with itself reversed, by a weight from Beta(alpha, alpha) "
        "per batch, targets too (timm's Mixup; 0: off). With --cutmix, each batch takes one of the two at even odds.",
    )
    cutmix: float = opt(
        0.0,
        "CutMix's alpha: a box of each device's batch is pasted from the batch reversed, its area from "
        "Beta(alpha, alpha) per batch; the targets' weights are the areas (0: off).",
    )
    drop_path: float = opt(
        0.0,
        "Stochastic depth of the ViTs: the largest rate a block's residual branches are dropped at (rising "
        "linearly from 0 at the first block, as DeiT), per sample while training.",
    )
    vit_pool: str = opt(
        "gap",
        "How the ViTs pool their tokens for the head: gap (global average, big_vision's ImageNet recipe) or cls "
        "(a class token).",
        choices=("gap", "cls"),
    )
    attention: str = opt(
        "auto",
        "The ViTs' attention (jax.nn.dot_product_attention): xla, cudnn (cuDNN's fused kernel), cudnn-padded "
        "(the sequence padded to a multiple of 64 for it, the padding masked), or auto: on GPUs in bf16 the first "
        "cuDNN form that compiles for the model's shapes, else xla. The choice is in rank_map.json and the rank line.",
        choices=("auto", "xla", "cudnn", "cudnn-padded"),
    )
    init_from: str | None = opt(
        None,
        "Fine-tune: start from the parameters (and BatchNorm statistics) of a run directory's newest "
        "checkpoint, one of its checkpoints/STEP folders or an Orbax checkpoint of a compatible model; not its "
        "optimizer, step or data position. A head of another --num-classes is re-initialised.",
        path=True,
    )
    layer_decay: float = opt(
        1.0,
        "ViTs: layer-wise learning-rate decay (BEiT, DeiT III): block i of D gets the rate × decay^(D - i), the "
        "embeddings decay^(D + 1), the head and final norm the rate itself (1: off).",
    )

    def decay_epoch_list(self) -> list[int]:
        """--decay-epochs as integers ("30,60" -> [30, 60]); raises ValueError on anything else."""
        return [int(e) for e in self.decay_epochs.replace(" ", "").split(",") if e]

    def per_device_batch(self, devices: int) -> int:
        """Samples per device per step: --global-batch-size split over `devices`, else --batch-size."""
        return self.global_batch_size // devices if self.global_batch_size else self.batch_size


@dataclass(frozen=True)
class DistributedConfig:
    """How the job's processes meet: the user's settings. What the launcher fills in is `Layout`; what a
    task learns from its environment is in topology."""

    platform: str = opt(
        "auto", "Devices to train on: gpu, cpu, or auto (GPUs if JAX sees any).", choices=("auto", "gpu", "cpu")
    )
    init_timeout_s: int = opt(
        120, "Seconds jax.distributed.initialize waits for every process.", on_resume="may change"
    )
    heartbeat_timeout_s: int = opt(
        100, "Seconds without a heartbeat before JAX declares a process dead.", on_resume="may change"
    )
    barrier_timeout_s: int = opt(
        900,
        "Seconds a process waits at a barrier for the others (the slowest one's evaluation, start-up steps).",
        on_resume="may change",
    )


@dataclass(frozen=True)
class Layout:
    """The job's layout as the launcher planned it (launcher/config.py: task_spec): no flag or --config key
    sets it. None: the task finds the value in its environment (topology.from_environment)."""

    backend: str = "train"  # who started the tasks, and so whose variables they read: train (one process), local, slurm
    num_processes: int | None = None  # None: a --nodes range, where the tasks count themselves
    local_device_count: int | None = None  # devices per process (CPU: how many to create); None: every one it sees
    coordinator_address: str | None = None  # host:port of process 0's coordinator; None: from the environment


@dataclass(frozen=True)
class ResilienceConfig:
    """Checkpoints, preemption and the step watchdog."""

    checkpoint_every_steps: int = opt(
        0, "Also checkpoint every N SGD steps within an epoch (0: not by steps).", on_resume="may change"
    )
    checkpoint_every_min: float = opt(
        10.0,
        "Also checkpoint when this many minutes passed since the last checkpoint (0: not by time). "
        "Checkpoints are always taken at epoch ends.",
        on_resume="may change",
    )
    keep_checkpoints: int = opt(
        3, "Checkpoints kept; older ones are deleted once a newer one is complete.", on_resume="may change"
    )
    checkpoint_async: str = opt(
        "auto",
        "Write checkpoints in the background (Orbax's asynchronous checkpointing): the step waits only while "
        "the state is copied to host memory (and for the previous checkpoint, if it is still being written). "
        "on, off, or auto: on for a train state of 64 MiB or more, off below (the MNIST MLP's epochs ran 0.19 s "
        "with its 20 MiB written in the foreground, 0.23 s with the write beside the next epoch, on an H200). "
        "Each is atomic either way: a rank killed mid-write leaves the newest complete one to resume from.",
        choices=("auto", "on", "off"),
        on_resume="may change",
    )
    max_requeues: int = opt(
        3, "Times a preempted or timed-out SLURM job requeues itself from its checkpoint.", on_resume="may change"
    )
    # 20 s: found within 24 s, few false alarms (why: resilience/watchdog.py, at BEAT_S)
    watchdog_s: int = opt(
        20, "A rank whose heartbeat is older than this (stopped, hung, dead) stops the job.", on_resume="may change"
    )
    on_stuck: str = opt(
        "stop",
        "What the watchdog does: stop the job, or requeue it from its last checkpoint.",
        choices=("stop", "requeue"),
        on_resume="may change",
    )


@dataclass(frozen=True)
class ObserveConfig:
    """What a run shows of itself beyond metrics.jsonl: TensorBoard and W&B scalars, profiler traces."""

    log_every_steps: int = opt(
        100,
        "Write training scalars (loss, learning rate, images/s, data wait, step time) at the first check point "
        "past every N SGD steps, from values read there anyway: check points come every --sync-every-steps steps "
        "on CPU, every 256 on GPUs, so logging adds no device sync. 0: epoch scalars only.",
        on_resume="may change",
    )
    tensorboard: bool = opt(
        True,
        "Write TensorBoard event files into RUN_DIR/tensorboard (`tensorboard --logdir runs/` shows every run).",
        on_resume="may change",
    )
    wandb_project: str | None = opt(
        None,
        "Also log to this Weights & Biases project (pip install 'dali-launch[wandb]'). The run id is kept in "
        "the run directory: a requeued or resumed run continues the same W&B run.",
        on_resume="may change",
    )
    wandb_mode: str = opt(
        "auto",
        "W&B mode: online, offline (`wandb sync` later), or auto ($WANDB_MODE, else online).",
        choices=("auto", "online", "offline"),
        on_resume="may change",
    )
    profile_steps: str = opt(
        "",
        "Trace SGD steps A to B-1 (A:B, global steps) with the JAX profiler into RUN_DIR/tensorboard/rank-N "
        "(TensorBoard's profile plugin, XProf, Perfetto). Steps fused in one device call are traced together.",
        on_resume="may change",
    )
    profile_ranks: str = opt(
        "0", "Processes that trace --profile-steps: comma-separated ranks, e.g. 0,1.", on_resume="may change"
    )

    def profile_range(self) -> tuple[int, int] | None:
        """--profile-steps as (first, end), end excluded; None when unset. ValueError when malformed."""
        if not self.profile_steps:
            return None
        first, end = (int(part) for part in self.profile_steps.split(":"))
        if not 0 <= first < end:
            raise ValueError(self.profile_steps)
        return first, end

    def ranks_to_profile(self) -> set[int]:
        """--profile-ranks as a set of process ids. ValueError when malformed."""
        ranks = {int(part) for part in self.profile_ranks.split(",")}
        if min(ranks) < 0:
            raise ValueError(self.profile_ranks)
        return ranks


@dataclass(frozen=True)
class TaskSpec:
    """Everything one task needs, written once to the run directory as config.json."""

    run_dir: str
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    distributed: DistributedConfig = DistributedConfig()
    resilience: ResilienceConfig = ResilienceConfig()
    observe: ObserveConfig = ObserveConfig()
    layout: Layout = Layout()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        return from_dict(cls, _compatible(json.loads(text)))

    def how_to_resume(self) -> str:
        """The command (`quoted`) that continues this run: its directory says everything else (launcher/route/resume.py)."""
        return f"`dali-launch --resume {self.run_dir}`"

    @classmethod
    def load(cls, run_dir: str | Path) -> TaskSpec:
        """The spec in `run_dir`, with `run_dir` where it is now: a run directory may have been moved."""
        from dali_launch.trainer.run_dir import RunPaths

        spec = cls.from_json(RunPaths(run_dir).config.read_text())
        return dataclasses.replace(spec, run_dir=str(Path(run_dir).absolute()))


def _compatible(values: dict) -> dict:
    """A config.json as this version reads it. Written by the version before `Layout`, it holds the layout
    in `distributed` and names the one-process mode `none`: run directories of that version still resume
    and list."""
    distributed = dict(values.get("distributed", {}))
    moved = {f.name: distributed.pop(f.name) for f in dataclasses.fields(Layout) if f.name in distributed}
    layout = {**moved, **values.get("layout", {})}
    if layout.get("backend") == "none":
        layout["backend"] = "train"
    return {**values, "distributed": distributed, "layout": layout}


def from_dict(cls, values: dict):
    """Rebuilds a (nested) config dataclass; unknown keys are an error, not silently dropped."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {', '.join(unknown)}")
    kwargs = {}
    for name, value in values.items():
        kind = hints[name]
        kwargs[name] = from_dict(kind, value) if dataclasses.is_dataclass(kind) else value
    return cls(**kwargs)
