"""How the steps run: epochs, batches, fusion and parallelism, the seed, what a NaN does.

The [step] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class StepConfig:
    epochs: int = opt(5, "Training epochs.", on_resume="may change")
    batch_size: int = opt(50, "Samples per device per step.", details="Samples per device per step (the example's 50).")
    global_batch_size: int | None = opt(
        None,
        "Samples per step over all devices (overrides --batch-size).",
        details="Samples per step over all devices; overrides --batch-size and must divide by the device count.",
    )
    steps_per_call: int = opt(
        0,
        "Steps fused into one device call (0: auto).",
        details=(
            "SGD steps fused into one device call: DALI reads this many batches at once and the device loops "
            "over them (lax.scan). The steps stay those of --batch-size; only host dispatch gets cheaper. "
            "0: auto: on GPUs about 1,200 samples per device and call (24 steps of the example's 50), at most 64; "
            "on CPUs 1. The value used is in rank_map.json and the first log lines."
        ),
    )
    parallel: str = opt(
        "auto",
        "sharded (one jit program over a mesh), pmap, or auto.",
        details=(
            "How steps run on the devices: sharded (one jit program over a job-wide device mesh; XLA "
            "partitions it and inserts the all-reduce) or pmap (one replica per device, gradients summed by psum; "
            "BatchNorm normalises each device's own rows). The same SGD steps. auto: pmap for a model with "
            "BatchNorm statistics on more than one device (the faster for ResNet-50: docs/scale.md), else sharded."
        ),
        choices=("auto", "sharded", "pmap"),
    )
    mesh: str = opt(
        "auto",
        "How devices split the work, e.g. data:2,fsdp:4 or tensor:2 (auto: what fits).",
        details=(
            "How the job's devices split the work (plan/mesh.py), as AXIS:COUNT parts whose counts multiply to the "
            "device count: data (replicas of the train state) and fsdp (the state sharded over a group's devices, "
            "ZeRO-3: each array's largest dividing dimension split, gathered for the forward pass), e.g. "
            "data:2,fsdp:4, and tensor (a transformer block split as Megatron does: attention by heads, the MLP by "
            "units; the ViTs, or a model naming its layers as they do). Every device reads its own shard of the "
            "data either way, so the SGD steps are the same. "
            "Needs --parallel sharded (auto picks it). auto: data parallel while the train state and its gradients fit "
            "a device (XLA's pool; activations not counted), else fsdp over the fewest devices that hold them. "
            "Recorded in rank_map.json."
        ),
        on_resume="elastic",
    )
    offload: str = opt(
        "auto",
        "Optimizer state on the device, or in host memory (optimizer); auto: what fits.",
        details=(
            "Where the optimizer's state (SGD's momentum, AdamW's two moments) lives: device, or optimizer (the host's "
            "page-locked memory, laid out as on the devices: each device call brings it to them and back, once for "
            "all of its steps; --parallel sharded). The same SGD steps. auto: on the devices while the train state "
            "and its gradients fit them under the mesh, else in host memory where that makes them fit."
        ),
        choices=("auto", "device", "optimizer"),
        on_resume="may change",
    )
    seed: int = opt(0, "Seed for parameters and data shuffling.")
    elastic_batch: str = opt(
        "keep",
        "Resumed on another device count: keep the global batch, or rescale.",
        details=(
            "Runs resumed on another device count: keep the global batch (the per-device "
            "batch changes; it must divide) or rescale (keep the per-device batch; the learning rate is scaled by "
            "new global batch / the run's first, the linear scaling rule)."
        ),
        choices=("keep", "rescale"),
        on_resume="elastic",
    )
    sync_every_steps: int = opt(
        10,
        "Wait for the device at least every N steps.",
        details="Wait for the device at least every N steps (bounds queued work; gloo on CPU deadlocks without it).",
        on_resume="may change",
    )
    on_nan: str = opt(
        "stop",
        "A loss that is not finite: stop, or skip-step (drop the update).",
        details=(
            "A training loss that is not finite (NaN, Inf: the run diverged), found at the loop's sync points with no "
            "extra device sync: stop (every rank, one line naming the steps and the last good checkpoint, which "
            "is kept) or skip-step (drop each such update and count it)."
        ),
        choices=("stop", "skip-step"),
        on_resume="may change",
    )
    record_samples: bool = opt(
        False,
        "Debug: record a fingerprint of every training sample seen.",
        details="Debug: write a fingerprint of every training sample seen, per epoch and rank.",
        on_resume="may change",
    )

    def per_device_batch(self, devices: int) -> int:
        """Samples per device per step: --global-batch-size split over `devices`, else --batch-size."""
        return self.global_batch_size // devices if self.global_batch_size else self.batch_size
