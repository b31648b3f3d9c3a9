"""Every `auto` value of a task, resolved once, here, from what the task knows; recorded in rank_map.json.

Three stages, each a function of what is known by then and each giving resolved values only:
  1. placement.place, before JAX or DALI start (task.py, before topology.configure_process_env): where
     DALI decodes and whether XLA may capture CUDA graphs, which the process environment must say first;
  2. `resolve`, once this process's devices are counted and the start point is read, before anything is
     built: everything the pipelines, the evaluator and the step take (`Resolved`). Not before JAX
     starts: a `train` run without --gpus-per-node trains on every device JAX sees, and the batch,
     readers and threads per device follow from that count;
  3. `parallel` and `checkpoint_async`, once the model's abstract shapes are known (set_up.py, before the
     step, the state and the checkpointer are built): whether the model keeps mutable collections decides
     --parallel auto, the train state's size --checkpoint-async auto.

decoder          where DALI decodes (placement.py): cpu on CPU devices; on GPUs the pipeline's word
cuda_graphs      whether XLA captures CUDA graphs: only while DALI stays off the GPU
xla_flags        XLA_FLAGS set before JAX starts (placement.py): on GPUs the run root's autotuning folder and --deterministic's kernels
steps_per_call   SGD steps fused into one device call (the same steps: only the host's dispatch
                 changes). GPUs: about CALL_SAMPLES samples per device and call, at most MAX_STEPS
                 steps (the example's batch of 50: 24 steps; measured best on an H200, README);
                 CPUs: 1 (XLA:CPU runs convolutions inside a scan ~15x slower, and gloo needs a
                 wait every few steps anyway)
readers          DALI pipelines per device (shards.readers_per_device), for training and evaluation
eval_batch       --eval-batch-size: GPUs: training's batch per device and step (its compile reuses training's
                 autotuning); CPUs: EVAL_CPU_BATCH
reader_threads   DALI CPU threads per pipeline (shards.reader_threads): 2 where the CPU decodes (and
                 more readers), the cores per device (at most 8) where nvJPEG does
feed_workers     --sample-order global: DALI worker processes per pipeline reading its records: the cores
                 per device its pipelines' threads leave, at most MAX_FEED_WORKERS (0: in-process)
output_dtype     what image pipelines output: float16 under --precision bf16 (DALI has no bfloat16;
                 the model casts on the device), else float32
xla_options      XLA's own settings (step/xla_options.py, stage 1 with the placement): GPU_DEFAULTS on GPUs
batchnorm_stats  the precision of BatchNorm's batch statistics in models that take it (resnet50):
                 BATCHNORM_STATS by platform (float32, Flax's default, until measured otherwise)
decoded_cache    --decoded-cache (data/decoded_cache.py): auto keeps each training sample decoded, where
                 AUTO_KINDS says a kind won on the platform and the decoded split (memory.py's estimate) fits: the CPU decoder's in host memory (this
                 process's shards within a quarter of the available memory, shared by the host's
                 processes), nvJPEG's in DALI's decoder cache (a device's shard, with a quarter to spare,
                 within the GPU memory XLA's pool leaves less 8 GiB); off under --sample-order global and
                 for pipelines that do not decode through args.decode; a resumed run keeps its
                 checkpoint's kind (another kind is another DALI graph, which its states do not fit)
elastic          a run resumed from a checkpoint on another device count: the per-device batch, steps per
                 call and learning-rate scale elastic.py plans for it (else None)
remainder        shard order, resumed mid-epoch on another layout than the checkpoint's (devices, readers,
                 batch, steps per call): how the rest of that epoch is read here (data/hosting.py; else None)
pool_grad        the gradient of the built-in ResNets' stem max pool (model/pooling.py): POOL_GRAD by platform,
                 masks under --deterministic (XLA:GPU's deterministic scatter was 16 ms of a 52 ms ResNet-50 step)
mesh             how the devices split the work (step/mesh.py), stage 3: auto is data parallel over all
parallel         how steps run (step/parallel.py): sharded under a --mesh that shards the state; else pmap
                 for a model with mutable collections (BatchNorm statistics) on more than one device, where each device normalises its own rows and the
                 statistics are averaged once a step; under sharded the batch is one job-wide array and
                 every BatchNorm layer all-reduces its moments inside the step (99 all-reduces in a
                 ResNet-50 step: 5,870 against 6,300 images/s per H200 on two, README). Else sharded:
                 one program, fewer host dispatches (README's MNIST tables)
attention        the built-in ViTs' attention implementation (model/attention.py), stage 2: auto is xla (the
                 form measured on one H200); a cuDNN form given is probed for the model's shapes ("" for others)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass

from dali_launch.trainer import entry_points
from dali_launch.trainer.config import DataConfig, TaskSpec, replaced
from dali_launch.trainer.data import augment, contract, shards
from dali_launch.trainer.data.hosting import Remainder, ShardLayout
from dali_launch.trainer.data.memory import Room
from dali_launch.trainer.data.placement import Placement
from dali_launch.trainer.model import attention, vit
from dali_launch.trainer.resilience.start_point import StartPoint
from dali_launch.trainer.settings.eval import EVAL_CPU_BATCH
from dali_launch.trainer.settings.step import MAX_STEPS

CALL_SAMPLES = 1200
BATCHNORM_STATS = {"gpu": "float32", "cpu": "float32"}  # benchmarks/step_levers.py's batchnorm-compute lever
# masks: 0.31x select_and_scatter's time on 2 CPU cores (`python benchmarks/pool_grad.py --batch 32`); on one H200
# ResNet-50's step gave 7,038 images/s with masks against 7,029 with the scatter, one run: not faster, so the GPU
# keeps JAX's own (benchmarks/results/issue38/session7-step_levers.json). Under --deterministic masks everywhere.
POOL_GRAD = {"gpu": "scatter", "cpu": "masks"}
OFF, HOST, DECODER = "off", "host", "decoder"  # --decoded-cache's kinds
# What auto turns on where it fits, by platform: only a kind measured faster than decoding every epoch there
# (benchmarks/against.py; tests/test_decoded_cache.py holds this table to benchmarks/results/issue38/'s runs).
# The host table lost on both: MNIST's epoch 0.61 s with it, 0.23 s without, on one H200 (DALI's CPU
# python_function converts each sample under the GIL the loop needs); about even on 2 CPU cores. DALI's decoder
# cache changes how ResNet-50's GPU path decodes and is not measured yet. A SIZE turns either kind on.
AUTO_KINDS: dict[str, tuple[str, ...]] = {"cpu": (), "gpu": ()}
DECODER_SLACK = 1.25  # DALI's decoder cache sized a quarter above the estimate: no image left out by its error
MAX_FEED_WORKERS = 4  # one reads as fast as DALI's own reader (README); more ride out slow reads


@dataclass(frozen=True)
class Resolved:
    """Stage 2: every value the pipelines, the evaluator and the step are built from (`parallel`: stage 3)."""

    platform: str
    decoder: str
    cuda_graphs: bool
    batch_per_device_step: int
    steps_per_call: int
    readers_per_device: int
    eval_readers_per_device: int
    eval_batch_per_device: int
    reader_threads: int
    output_dtype: str
    sample_order: str = "shards"
    feed_workers: int = 0
    lr_scale: float = 1.0
    elastic: dict | None = None
    xla_options: dict = dataclasses.field(default_factory=dict)  # stage 1's (placement.Placement)
    batchnorm_stats: str = "float32"  # float32 or compute
    pool_grad: str = "scatter"  # scatter or masks
    decoded_cache: str = "off"  # off, host (this process's decoded shards in host memory) or decoder (DALI's)
    decoded_cache_mb: int = 0  # host: the estimated decoded shards; decoder: its size per device
    decoded_cache_note: str = ""  # why, for the start-up line
    attention: str = ""
    remainder: Remainder | None = None
    xla_flags: dict = dataclasses.field(default_factory=dict)  # as set before JAX started (stage 1)

    @property
    def call_batch(self) -> int:
        """Samples per device and device call: what each device's DALI readers read together."""
        return self.batch_per_device_step * self.steps_per_call

    def as_dict(self, parallel: str, checkpoint_async: bool | None = None, mesh: str | None = None) -> dict:
        """What rank_map.json records: these values, and --parallel, --checkpoint-async and --mesh as stage 3
        resolved them."""
        stage3 = {"parallel": parallel, "checkpoint_async": checkpoint_async, "mesh": mesh}
        return {**asdict(self), **{k: v for k, v in stage3.items() if v is not None}}

    def dali_phrase(self, config: DataConfig) -> str:
        """How this task's DALI pipelines run, for its start-up line."""
        hardware = f" ({config.hw_decoder_load:.0%} on the hardware decoder)" if self.decoder == "mixed" else ""
        feed = ""
        if self.sample_order == "global":
            where = f"{self.feed_workers} worker processes per pipeline" if self.feed_workers else "this process"
            feed = f", records read in {where}"
        return (
            f"DALI decodes on {'the GPU' if self.decoder == 'mixed' else 'the CPU'}{hardware}, "
            f"{self.reader_threads} threads per pipeline, prefetch {config.prefetch}, {self.output_dtype} out{feed}"
            f"{augment.phrase(config)}, decoded cache {self.decoded_cache_note}"
        )

    def startup_phrase(self, spec: TaskSpec) -> str:
        """How DALI runs and the model's resolved choices (if it has any), for the task's start-up line."""
        model = attention.phrase(self.attention, vit.tokens(spec.data.image_size, spec.model.vit_pool))
        return "; ".join(p for p in (self.dali_phrase(spec.data), model) if p)

    def data_config(self, config: DataConfig) -> DataConfig:
        """`config` with its auto values replaced by these: what the pipelines are built from."""
        return dataclasses.replace(
            config,
            decoder=self.decoder,
            reader_threads=self.reader_threads,
            output_dtype=self.output_dtype,
            decoded_cache=str(self.decoded_cache_mb) if self.decoded_cache != OFF else "off",
        )

    def resolved(self, spec: TaskSpec) -> TaskSpec:
        """`spec` with the learning rate elastic.py's rescale rule sets (what the optimizer is built from) and
        the BatchNorm statistics' precision, the stem pool's gradient and --attention resolved (what the model is built from:
        entry_points.model_options); --remat auto as none, the model made first (set_up.py turns it to blocks where
        the compiled step does not fit)."""
        lr, chosen = spec.optimizer.learning_rate * self.lr_scale, self.attention or spec.model.attention
        return replaced(
            spec,
            learning_rate=lr,
            attention=chosen,
            remat="none" if spec.model.remat == "auto" else spec.model.remat,
            batchnorm_stats=self.batchnorm_stats,
            pool_grad=self.pool_grad,
            eval_batch_size=self.eval_batch_per_device,
        )


def steps_per_call(setting: int, platform: str, batch: int, readers: int = 0) -> int:
    """--steps-per-call, where 0 (auto) follows the rule above; with --readers-per-device R given, a
    multiple of the steps that make a call R readers can share equally."""
    if setting:
        return setting
    k = max(1, min(MAX_STEPS, round(CALL_SAMPLES / batch))) if platform == "gpu" else 1
    unit = readers // math.gcd(readers, batch) if readers else 1
    return max(unit, round(k / unit) * unit)


def parallel(setting: str, stateful: bool, global_devices: int, shards_state: bool = False) -> str:
    """Stage 3: --parallel, where auto follows the rule above; `stateful`: the model keeps mutable collections;
    `shards_state`: --mesh shards the train state, which only one jit program over the mesh can (sharded)."""
    if setting != "auto":
        return setting
    return "pmap" if stateful and global_devices > 1 and not shards_state else "sharded"


ASYNC_MIN_MB = 64  # --checkpoint-async auto: a train state this large is written in the background


def checkpoint_async(setting: str | bool, state_bytes: int) -> bool:
    """Stage 3: --checkpoint-async, where auto writes in the background only a state of ASYNC_MIN_MB or more:
    the MNIST MLP's 20 MiB, written beside the next epoch, took its epoch from 0.19 to 0.23 s on an H200 (Orbax's
    writer is Python threads, under the GIL the loop needs); a large state's write would stall the step longer
    than its copy. (True/False: the setting of a run directory written before auto existed.)"""
    if isinstance(setting, bool) or setting != "auto":
        return setting in (True, "on")
    return state_bytes >= ASYNC_MIN_MB << 20


def feed_workers(setting: int, order: str, cores_per_device: int, readers: int, threads: int) -> int:
    """--feed-workers, where -1 (auto) takes the cores per device left by the pipelines' threads."""
    if order != "global":
        return 0
    if setting >= 0:
        return setting
    return max(0, min(MAX_FEED_WORKERS, (cores_per_device - readers * threads) // readers))


def batchnorm_stats(setting: str, platform: str) -> str:
    """--batchnorm-stats, where auto follows BATCHNORM_STATS."""
    return BATCHNORM_STATS[platform] if setting == "auto" else setting


def pool_grad(setting: str, platform: str, deterministic: bool) -> str:
    """--pool-grad, where auto follows POOL_GRAD, and masks under --deterministic."""
    if setting != "auto":
        return setting
    return "masks" if deterministic else POOL_GRAD[platform]


def decoded_cache(
    data: DataConfig,
    decoder: str,
    cacheable: bool,
    room: Room,
    share: float,
    kept: str | None = None,
    platform: str = "cpu",
) -> tuple[str, int, str]:
    """--decoded-cache as (kind, MiB, what the start-up line says), by the rule above. `share`: this process's
    part of the split (host) or a device's (decoder); `kept`: a resumed checkpoint's kind (None: afresh)."""
    setting, kind = data.decoded_cache_mb(), HOST if decoder == "cpu" else DECODER
    if data.sample_order == "global" or kept == OFF or (kept is None and setting == 0):
        why = "--sample-order global" if data.sample_order == "global" else "--decoded-cache off"
        return OFF, 0, f"off ({'the checkpoint resumed was written without one' if kept == OFF else why})"
    if not cacheable:
        return OFF, 0, "off (the pipeline does not decode through args.decode)"
    if kept is None and setting is None and kind not in AUTO_KINDS[platform]:
        return (
            OFF,
            0,
            f"off (auto: no {kind} cache was measured faster than decoding on {platform.upper()}s; --decoded-cache SIZE keeps one)",
        )
    need = None if room.split_mb is None else room.split_mb * share
    may = setting or (room.host_mb if kind == HOST else room.device_mb)
    partial = kind == DECODER and setting  # DALI's cache holds what fits; a host table must hold every sample
    if kept is None and not partial and need is None:
        return OFF, 0, "off (the decoded size of the data set is unknown: a format records/ does not read)"
    if kept is None and not partial and need > may:
        return OFF, 0, f"off (~{need:,.0f} MiB decoded would not fit in the {may:,} MiB it may use)"
    if kind == HOST:
        mb, where = math.ceil(need if need is not None else may), "in host memory"
    else:
        mb, where = may if need is None else min(may, math.ceil(need * DECODER_SLACK)), "in DALI's decoder cache"
    mb = max(1, mb)
    return kind, mb, f"{where}: {mb:,} MiB" + (" (as the checkpoint resumed)" if kept else "")


def resolve(
    spec: TaskSpec,
    where: Placement,
    local_devices: int,
    global_devices: int,
    processes_here: int,
    start: StartPoint = StartPoint(),
    room: Room = Room(),
) -> Resolved:
    """Stage 2. `start`: where the task starts; a checkpoint brings elastic.py's plan.
    `room`: the decoded split and the memory it may take (memory.measure; not measured: no cache)."""
    plan = start.plan
    batch = plan.batch_per_device_step if plan else spec.step.per_device_batch(global_devices)
    k = (
        plan.steps_per_call
        if plan
        else steps_per_call(spec.step.steps_per_call, where.platform, batch, spec.data.readers_per_device)
    )
    cores = shards.cores_per_device(local_devices, processes_here)
    threads = shards.reader_threads(spec.data.reader_threads, where.decoder, cores)
    data = dataclasses.replace(spec.data, reader_threads=threads)
    readers = shards.readers_per_device(data, where.platform, where.decoder, batch * k, cores)
    eval_batch = eval_batch_size(spec.eval.eval_batch_size, where.platform, batch)
    eval_readers = shards.readers_per_device(data, where.platform, where.decoder, eval_batch, cores)
    share = local_devices / global_devices if where.decoder == "cpu" else 1 / global_devices
    name = spec.data.pipeline
    cacheable = contract.cacheable(entry_points.load("pipeline", name), name, spec.data.decoded_cache)
    kept = decoded_cache(spec.data, where.decoder, cacheable, room, share, start.decoded_cache, where.platform)
    return Resolved(
        platform=where.platform,
        decoder=where.decoder,
        cuda_graphs=where.cuda_graphs,
        batch_per_device_step=batch,
        steps_per_call=k,
        readers_per_device=readers,
        eval_readers_per_device=eval_readers,
        eval_batch_per_device=eval_batch,
        reader_threads=threads,
        output_dtype=output_dtype(spec),
        sample_order=spec.data.sample_order,
        feed_workers=feed_workers(spec.data.feed_workers, spec.data.sample_order, cores, readers, threads),
        lr_scale=plan.lr_scale if plan else 1.0,
        elastic=plan.as_dict() if plan and plan.changed else None,
        xla_options=where.xla_options,
        batchnorm_stats=batchnorm_stats(spec.model.batchnorm_stats, where.platform),
        pool_grad=pool_grad(spec.model.pool_grad, where.platform, spec.xla.deterministic),
        decoded_cache=kept[0],
        decoded_cache_mb=kept[1],
        decoded_cache_note=kept[2],
        attention=attention.choose(
            spec.model.attention,
            where.platform,
            spec.model.precision,
            vit.attention_shape(spec.model.model, spec.data.image_size, spec.model.vit_pool),
        ),
        remainder=start.remainder(ShardLayout(global_devices, readers, batch, k), spec.step.elastic_batch),
        xla_flags=dict(where.xla_flags),
    )


def eval_batch_size(setting: int, platform: str, train_batch: int) -> int:
    """--eval-batch-size, 0 (auto) resolved: on GPUs training's batch per device and step, whose convolutions
    and GEMMs XLA has then autotuned already in this process (at 500 the cold ResNet-50 evaluation compiled
    for 10.9 s, autotuning its own; at 256, 3.9 s, in the epoch's shadow); on CPUs, which do not autotune,
    EVAL_CPU_BATCH (fewer, larger steps)."""
    if setting:
        return setting
    return train_batch if platform == "gpu" else EVAL_CPU_BATCH


def output_dtype(spec: TaskSpec) -> str:
    if spec.data.output_dtype != "auto":
        return spec.data.output_dtype
    return "float16" if spec.model.precision == "bf16" else "float32"
