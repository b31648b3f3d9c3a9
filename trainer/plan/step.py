"""The step's decisions: its batch and fusion, how the model is built, and how the state lies on the devices.

Three named steps, each a pure function of what is known by then, each giving decided values only:
  `plan_step`     before anything is built (the placement, this job's devices, the start point known):
      batch_per_device_step  --batch-size, or --global-batch-size over the job; a checkpoint resumed on another
                             device count: elastic.py's plan for it (with its lr_scale)
      steps_per_call         SGD steps fused into one device call (the same steps: only the host's dispatch
                             changes). GPUs: about CALL_SAMPLES samples per device and call, at most MAX_STEPS
                             steps (the example's batch of 50: 24; measured best on an H200), or fewer, down to
                             half, where an epoch's last call then pads fewer rows (a padded row costs a real
                             one's time: 16,384 images at 64 a step took 14 calls of 19 steps, 4 % padding, where
                             16 calls of 16 steps hold them exactly); CPUs: 1 (XLA:CPU runs convolutions inside a
                             scan ~15x slower, and gloo needs a wait every few steps)
      batchnorm_stats        the precision of BatchNorm's batch statistics: BATCHNORM_STATS by platform
      pool_grad              the ResNets' stem pool's gradient: POOL_GRAD by platform, masks under --deterministic
                             (XLA:GPU's deterministic scatter was 16 ms of a 52 ms ResNet-50 step)
      attention              the ViTs' attention (model/attention.py): auto is xla (measured on one H200); a
                             cuDNN form given is probed for the model's shapes ("" for other models)
      remat                  none for auto until `rematerialised` has the compiled step
  `partitioned`   once the train state's shapes are known (plan/fit.py weighs them):
      mesh                   auto is data parallel over all devices while the state and its gradients fit a
                             device, else fsdp over the fewest devices that hold them; a mesh that cannot hold
                             them is refused in one line naming one that can
      parallel               sharded under a mesh that shards the state; else pmap for a model with mutable
                             collections (BatchNorm statistics) on more than one device, where each device
                             normalises its own rows and the statistics are averaged once a step (under sharded
                             every BatchNorm layer all-reduces inside the step: 99 all-reduces in a ResNet-50
                             step, 5,870 against 6,300 images/s per H200 on two); else sharded: one program
      offload                auto keeps the optimizer's state on the devices while it fits them under the mesh,
                             else in host memory where that makes it fit
      checkpoint_async       auto writes in the background only a state of ASYNC_MIN_MB or more: the MNIST MLP's
                             20 MiB, written beside the next epoch, took its epoch from 0.19 to 0.23 s on an H200
                             (Orbax's writer is Python threads, under the GIL the loop needs)
  `rematerialised` once the step has compiled: --remat auto is blocks where XLA's count of the step's buffers
                   exceeds the pool and the model takes it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field

from dali_launch.trainer.config import ModelConfig, StepConfig, TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.fit import StateSize, fits, fitting
from dali_launch.trainer.plan.fit import check as check_fit
from dali_launch.trainer.plan.mesh import Mesh, for_job, parse

CALL_SAMPLES = 1200
MAX_STEPS = 64  # --steps-per-call auto's most on GPUs
BATCHNORM_STATS = {"gpu": "float32", "cpu": "float32"}  # benchmarks/step_levers.py's batchnorm-compute lever
# masks: 0.31x select_and_scatter's time on 2 CPU cores (`python benchmarks/pool_grad.py --batch 32`); on one H200
# ResNet-50's step gave 7,038 images/s with masks against 7,029 with the scatter, one run: not faster, so the GPU
# keeps JAX's own. Under --deterministic masks everywhere.
POOL_GRAD = {"gpu": "scatter", "cpu": "masks"}
ASYNC_MIN_MB = 64


@dataclass(frozen=True)
class Partition:
    """How the train state lies on the job's devices and how device calls run over them."""

    parallel: str  # pmap or sharded
    mesh: Mesh
    offload: bool  # the optimizer's state in host memory
    checkpoint_async: bool  # checkpoints written in the background


@dataclass(frozen=True)
class StepPlan:
    batch_per_device_step: int
    steps_per_call: int
    lr_scale: float = 1.0
    elastic: dict | None = None  # elastic.py's plan, where it changes anything
    batchnorm_stats: str = "float32"  # float32 or compute
    pool_grad: str = "scatter"  # scatter or masks
    attention: str = ""  # "" for a model without attention of ours
    remat: str = "none"  # none or blocks
    cuda_graphs: bool = False  # XLA may run programs as CUDA graphs (the placement's)
    xla_options: dict = field(default_factory=dict)  # --xla-options, as set before JAX started
    xla_flags: dict = field(default_factory=dict)  # XLA_FLAGS set before JAX started
    partition: Partition | None = None  # `partitioned`: once the state's shapes are known

    @property
    def call_batch(self) -> int:
        """Samples per device and device call: what each device's DALI readers read together."""
        return self.batch_per_device_step * self.steps_per_call

    def model_options(self, settings: ModelConfig) -> dict:
        """The options a model factory may name (model/registry.py's MODEL_OPTIONS): the [model] settings, with
        the ones this plan decides as it decided them."""
        from dali_launch.trainer.model.registry import model_options

        decided = {"remat": self.remat, "batchnorm_stats": self.batchnorm_stats, "pool_grad": self.pool_grad}
        return {**model_options(settings), **decided, "attention": self.attention or settings.attention}

    def record(self) -> dict:
        """What rank_map.json records of it (the partition's values as its own keys)."""
        values = {k: v for k, v in asdict(self).items() if k != "partition"}
        if self.partition is not None:
            p = self.partition
            offload = "optimizer" if p.offload else "device"
            values |= {"parallel": p.parallel, "mesh": str(p.mesh), "offload": offload}
            values["checkpoint_async"] = p.checkpoint_async
        return values


def plan_step(spec: TaskSpec, facts: Facts, placement, start) -> StepPlan:
    """The decisions made before anything is built: `placement` the first step's (plan/placement.py), `start`
    the start point (a checkpoint on another device count brings elastic.py's plan)."""
    elastic = start.plan
    batch = elastic.batch_per_device_step if elastic else spec.step.per_device_batch(facts.job_device_count)
    readers = spec.data.readers_per_device
    per_device = math.ceil(facts.room.samples / facts.job_device_count) if facts.room.samples else None
    k = elastic.steps_per_call if elastic else steps_per_call(spec.step.steps_per_call, facts.platform, batch, readers)
    k = k if elastic or spec.step.steps_per_call else least_padding(k, batch, readers, per_device)
    return StepPlan(
        batch_per_device_step=batch,
        steps_per_call=k,
        lr_scale=elastic.lr_scale if elastic else 1.0,
        elastic=elastic.as_dict() if elastic and elastic.changed else None,
        batchnorm_stats=batchnorm_stats(spec.model.batchnorm_stats, facts.platform),
        pool_grad=pool_grad(spec.model.pool_grad, facts.platform, spec.xla.deterministic),
        remat="none" if spec.model.remat == "auto" else spec.model.remat,
        cuda_graphs=placement.cuda_graphs,
        xla_options=placement.xla_options,
        xla_flags=dict(placement.xla_flags),
        attention=attention_of(spec, facts.platform),
    )


def attention_of(spec: TaskSpec, platform: str) -> str:
    """--attention decided for the model's attention shapes on `platform` (model/attention.py's rule; "" for a
    model without attention of ours)."""
    from dali_launch.trainer.data import spectrograms
    from dali_launch.trainer.model import attention, vit  # JAX: only where a task plans

    shape = vit.attention_shape(spec.model.model, spectrograms.input_sides(spec.data), spec.model.vit_pool)
    return attention.choose(spec.model.attention, platform, spec.model.precision, shape)


def steps_per_call(setting: int, platform: str, batch: int, readers: int = 0) -> int:
    """--steps-per-call, where 0 (auto) follows the rule above; with --readers-per-device R given, a multiple of
    the steps that make a call R readers can share equally."""
    if setting:
        return setting
    k, unit = min(most_steps_per_call(0, platform), max(1, round(CALL_SAMPLES / batch))), _unit(readers, batch)
    return max(unit, round(k / unit) * unit)


def most_steps_per_call(setting: int, platform: str) -> int:
    """The most SGD steps a call fuses before the batch is known (what the launcher bounds a run's steps with):
    --steps-per-call given, else auto's most on `platform`."""
    return setting or (MAX_STEPS if platform == "gpu" else 1)


def least_padding(k: int, batch: int, readers: int, per_device: int | None) -> int:
    """Of the step counts from `k` down to half of it that R readers share (R = --readers-per-device, 0: any), the
    one whose epoch of `per_device` samples a device pads the fewest rows in its last call; the largest of equals.
    `k` itself where the count is unknown."""
    if not per_device:
        return k
    unit = _unit(readers, batch)
    fewer = [c for c in range(k, max(1, k // 2) - 1, -1) if c % unit == 0] or [k]
    return min(fewer, key=lambda c: math.ceil(per_device / (c * batch)) * c * batch)  # min keeps the first: largest


def _unit(readers: int, batch: int) -> int:
    """The fewest steps whose batches `readers` readers share equally (0 readers: any count)."""
    return readers // math.gcd(readers, batch) if readers else 1


def batchnorm_stats(setting: str, platform: str) -> str:
    """--batchnorm-stats, where auto follows BATCHNORM_STATS."""
    return BATCHNORM_STATS[platform] if setting == "auto" else setting


def pool_grad(setting: str, platform: str, deterministic: bool) -> str:
    """--pool-grad, where auto follows POOL_GRAD, and masks under --deterministic."""
    if setting != "auto":
        return setting
    return "masks" if deterministic else POOL_GRAD[platform]


def partitioned(plan: StepPlan, settings: StepConfig, facts: Facts, size: StateSize, async_setting) -> StepPlan:
    """`plan` with its partition: --mesh, --parallel, --offload and --checkpoint-async decided for a train state
    of `size` on this job's devices (facts.pool_bytes: the room on one); a mesh it cannot fit is refused."""
    devices, pool = facts.job_device_count, facts.pool_bytes
    layout = for_job(settings.mesh, devices)  # the launcher checked the setting: no error left here
    if parse(settings.mesh) is None and settings.parallel != "pmap":  # auto: data parallel while it fits
        layout = fitting(layout, devices, size, pool)
    offload = settings.offload == "optimizer"
    how = parallel(settings.parallel, size.stateful, devices, layout.shards_state or offload)
    if settings.offload == "auto" and how == "sharded" and not fits(size.need(layout), pool):  # the last resort
        offload = fits(size.need(layout, offload=True), pool)
    check_fit(layout, devices, size, offload, pool)
    partition = Partition(how, layout, offload, checkpoint_async(async_setting, size.total))
    return dataclasses.replace(plan, partition=partition)


def parallel(setting: str, stateful: bool, devices: int, shards_state: bool = False) -> str:
    """--parallel, where auto follows the rule above; `stateful`: the model keeps mutable collections;
    `shards_state`: the state is laid out over a mesh (or offloaded), which only one jit program can."""
    if setting != "auto":
        return setting
    return "pmap" if stateful and devices > 1 and not shards_state else "sharded"


def checkpoint_async(setting: str | bool, state_bytes: int) -> bool:
    """--checkpoint-async, where auto follows the rule above. (True/False: the setting of a run directory written
    before auto existed.)"""
    if isinstance(setting, bool) or setting != "auto":
        return setting in (True, "on")
    return state_bytes >= ASYNC_MIN_MB << 20


def rematerialised(plan: StepPlan, asked: str, takes: bool, step_bytes: int | None, pool: int | None) -> StepPlan:
    """`plan` once its step has compiled needing `step_bytes` on a device (XLA's count; None: not known): --remat
    auto turns to blocks where that exceeds `pool` and the model takes `remat` (`takes`)."""
    if asked != "auto" or not takes or step_bytes is None or pool is None or step_bytes <= pool:
        return plan
    return dataclasses.replace(plan, remat="blocks")


def check(settings: StepConfig, model: str, device_counts: list[int], per_node: int) -> None:
    """The launcher's checks of the step's settings for every device count a job may start with (`per_node`
    devices on each node), before anything is written: the same rules the task plans with."""
    from dali_launch.trainer.model.registry import MODELS, TENSOR_SPLIT

    try:
        for devices in device_counts:
            layout = for_job(settings.mesh, devices)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if per_node % layout.tensor:
        raise UsageError(
            f"--mesh {settings.mesh}: a tensor group of {layout.tensor} devices does not fit in a node of {per_node}, "
            f"so every block's all-reduces would cross the network; use a tensor count that divides {per_node}, "
            "and fsdp or data for the rest"
        )
    if settings.offload == "optimizer" and settings.parallel == "pmap":
        raise UsageError(
            "--offload optimizer brings the optimizer's state from host memory inside one jit program over the "
            "devices, which --parallel pmap is not; use --parallel sharded or auto"
        )
    if layout.shards_state and settings.parallel == "pmap":
        raise UsageError(
            f"--mesh {settings.mesh} shards the train state, which --parallel pmap (one whole copy per device) "
            "cannot; use --parallel sharded or auto"
        )
    if layout.tensor > 1 and model in MODELS and model not in TENSOR_SPLIT:
        raise UsageError(
            f"--mesh {settings.mesh}: the tensor axis splits attention heads and MLP blocks, which --model {model} "
            f"has none of; use fsdp instead (--mesh fsdp:{layout.tensor * layout.fsdp}), or a ViT "
            f"({', '.join(TENSOR_SPLIT)})"
        )
