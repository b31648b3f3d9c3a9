"""Whether a step fits each device under --mesh, checked twice before the state is placed, where XLA would
otherwise fail at its first allocation with a page of buffer sizes.

1. The train state, once its shapes are known (`fitting`, `check`): the state as laid out (parameters,
   optimizer state, EMA, statistics: runner.device_bytes) and its gradients (the parameters' bytes in
   the state's proportion per device). --mesh auto shards the state over the fewest devices that hold
   it; where none does, --offload auto keeps the optimizer's state in host memory if that makes it fit
   (what stays on a device is counted); a mesh that still cannot stops in one line naming the fsdp
   count that would fit.
2. The compiled step (`check_step`), once the compile-ahead thread has it: XLA's own count of its
   buffers on one device (arguments, temporaries: activations, gradients, gathered parameters, and
   outputs that reuse no donated argument), which the first call must allocate. One that exceeds the
   pool stops in one line with XLA's count at half the batch (compiled then), and whether that fits.
   Without the compile-ahead (--compile-cache off, --parallel pmap, a compile past its wait) the first
   call finds out.

The room is XLA's pool on the device (its `bytes_limit`); CPU devices do not say, and are not checked
unless DALI_LAUNCH_DEVICE_MEMORY_MB gives a pool (the test suite's stand-in for a GPU's memory).
"""

from __future__ import annotations

import os

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.step.mesh import Mesh

ENV = "DALI_LAUNCH_DEVICE_MEMORY_MB"
GIB, MIB = 1 << 30, 1 << 20


def pool_bytes(device) -> int | None:
    """XLA's memory pool on `device` ($DALI_LAUNCH_DEVICE_MEMORY_MB where given), None where unknown."""
    given = os.environ.get(ENV)
    if given:
        return int(given) << 20
    stats = device.memory_stats() or {}  # CPU devices: None
    return stats.get("bytes_limit")


def fitting(mesh, devices: int, state_total: int, param_bytes: int, pool: int | None):
    """--mesh auto's pick: `mesh` (data parallel) while its state and gradients fit `pool`, else the fewest
    fsdp devices that hold them (the smallest count divides a node's devices first), else `mesh` (`check`
    then says that nothing fits)."""
    if pool is None or state_total + param_bytes <= pool:
        return mesh
    fits = _fsdp_counts(1, devices, state_total + param_bytes, pool)
    return Mesh(data=devices // fits[0], fsdp=fits[0]) if fits else mesh


def _fsdp_counts(above: int, devices: int, whole: int, pool: int) -> list[int]:
    """The fsdp counts above `above` that divide `devices` and fit `whole` bytes split over them into `pool`."""
    return [k for k in range(above + 1, devices + 1) if devices % k == 0 and whole / k <= pool]


def need(on_device: int, laid_out: int, state_total: int, param_bytes: int) -> int:
    """The state's and its gradients' bytes on one device: `on_device` of the `laid_out` bytes of the state a device
    is given (the rest in host memory: --offload), the gradients laid out as the parameters (the state's share)."""
    return on_device + param_bytes * laid_out // state_total


def fits(need_bytes: int, pool: int | None) -> bool:
    return pool is None or need_bytes <= pool


def check(mesh, devices: int, need_bytes: int, state_total: int, param_bytes: int, pool: int | None) -> None:
    """Refuses a `mesh` whose state and gradients per device (`need`) exceed `pool`, naming the fsdp count that fits."""
    if fits(need_bytes, pool):
        return
    counts = _fsdp_counts(mesh.fsdp, devices, state_total + param_bytes, pool)
    if counts:
        fix = f"--mesh fsdp:{counts[0]} would need about {size((state_total + param_bytes) / counts[0])}"
    else:
        job = "the job's one device" if devices == 1 else f"the job's {devices} devices"
        fix = f"no fsdp count over {job} fits it: use more devices, a smaller model or bf16"
    raise UsageError(
        f"the train state and its gradients need {size(need_bytes)} per device under --mesh {mesh} (activations not "
        f"counted) but a device has {size(pool)}; {fix}"
    )


def step_buffers(compiled, host_arguments: int = 0) -> tuple[int, int] | None:
    """XLA's count of a compiled step's buffers on one device: (its arguments, the rest: activations and other
    temporaries, outputs that do not reuse a donated argument); None where the backend gives none.
    `host_arguments`: the arguments' bytes in host memory (--offload), which XLA:CPU counts as its own."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # not every backend implements it
        return None
    if stats is None:
        return None
    rest = stats.temp_size_in_bytes + max(0, stats.output_size_in_bytes - stats.alias_size_in_bytes)
    arguments = stats.argument_size_in_bytes
    if not getattr(stats, "host_argument_size_in_bytes", 0):  # a backend that tells them apart has left them out
        arguments -= host_arguments
    return arguments, rest


def check_step(runner, pool: int | None, mesh, recompute: str = "") -> None:
    """Refuses the step `runner` compiled ahead (its `buffers`, step_buffers) where it exceeds `pool`, before the
    state is placed: its first call could not allocate them. `runner.buffers_at(b)`, the same step's at b
    samples per device and step, says whether half its batch would fit; `recompute`: the flag that would keep
    fewer activations, where the model takes one (--remat blocks)."""
    if step_fits(runner, pool):
        return
    recompute_first = (
        f"add {recompute} (activations recomputed in the backward pass, not kept), or " if recompute else ""
    )
    raise UsageError(
        f"the training step needs {step_words(runner, f' under --mesh {mesh}')} but a device has {size(pool)}; "
        f"{recompute_first}{_batch_that_fits(runner.batch_size, runner.buffers_at, pool)}"
    )


def step_fits(runner, pool: int | None) -> bool:
    """Whether the step `runner` compiled ahead fits `pool`; True where either is unknown."""
    return runner.buffers is None or pool is None or sum(runner.buffers) <= pool


def step_words(runner, where: str = "") -> str:
    """What the step `runner` compiled ahead needs on a device (`where`: under which mesh), in words."""
    arguments, rest = runner.buffers
    return (
        f"{size(arguments + rest)} per device{where} (XLA's count: {size(arguments)} of train state and batch, {size(rest)} "
        f"of activations, gradients and other temporaries, at {runner.batch_size} samples per device and step)"
    )


def _batch_that_fits(batch: int, buffers_at, pool: int) -> str:
    """The fix, from XLA's count at half the batch: a compiled count, not a line through two (XLA's buffers do
    not grow linearly with the batch: the MLP on CPU needed 38.5, 42.1, 53.2 and 92.5 MiB at 332, 664, 1000
    and 2000 samples)."""
    half = batch // 2
    other = buffers_at(half) if half else None
    shard = "shard the state over more devices (--mesh fsdp:M; a ViT's blocks: tensor:K)"
    if other is None:
        return f"use a smaller --batch-size, bf16, or {shard}"
    if sum(other) <= pool:
        return f"--batch-size {half} fits (XLA's count there: {size(sum(other))}); or use bf16, or {shard}"
    return f"at --batch-size {half} it would still need {size(sum(other))}: {shard}, use bf16 or a smaller batch"


def size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"
