"""The task spec: plain, frozen, JSON-serialisable dataclasses that the launcher fills and each task reads.

This module imports nothing heavy so the launcher can build flags from it instantly. Each field's
`help` metadata is its command-line help; derived values (per-device batch, shard ids) are
methods or functions elsewhere, never fields.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.settings.compile_fields import CompileFields
from dali_launch.trainer.settings.eval_fields import EvalFields
from dali_launch.trainer.settings.fields import opt
from dali_launch.trainer.settings.model_fields import ModelFields
from dali_launch.trainer.settings.optim_fields import OptimizerFields
from dali_launch.trainer.settings.recipe_fields import RecipeFields
from dali_launch.trainer.settings.step_fields import StepFields

__all__ = [
    "DataConfig",
    "DistributedConfig",
    "Layout",
    "ObserveConfig",
    "ResilienceConfig",
    "TaskSpec",
    "TrainConfig",
    "opt",
]


RANDAUGMENT_DEFAULT = "2,9"  # --randaugment unset: timm's rand-m9-n2


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
        "through args.read; skip is refused for a Caffe2 LMDB (--pipeline mnist), which has no index to leave one out of.",
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
        "",
        "--augment randaugment: N,M: N operations per image at magnitude M (0..30), as timm's rand-m9-n2; "
        "unset: 2,9. Refused with any other --augment.",
    )

    def randaugment_nm(self) -> tuple[int, int]:
        """--randaugment as (N, M), 2,9 when unset; ValueError when it is not two integers."""
        n, m = (int(part) for part in (self.randaugment or RANDAUGMENT_DEFAULT).replace(" ", "").split(","))
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
class TrainConfig(CompileFields, EvalFields, RecipeFields, OptimizerFields, StepFields, ModelFields):
    """What a task trains and how, by concern (trainer/settings/): the model, the steps, the optimizer, the
    recipe, the evaluation, XLA's side. Its fields stay flat (`spec.train.learning_rate`), so config.json,
    config.toml's [train] table and the flags are those of one table; the help lists them in that order."""


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
    """The job's layout as the launcher planned it (launcher/run_config.py: task_spec): no flag or --config key
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
