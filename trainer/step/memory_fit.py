"""Whether the train state fits each device under --mesh, checked once the state's shapes are known and before
it is placed: --mesh auto shards it over the fewest devices that hold it, and a mesh given that cannot hold
it stops in one line that names the fsdp count that would fit, where XLA would otherwise fail at its first
allocation with a page of buffer sizes.

Counted: the state as laid out (parameters, optimizer state, EMA, statistics: runner.device_bytes) and
the gradients (the parameters' bytes over the fsdp count: reduce-scattered). Not counted: activations,
which depend on the batch and XLA's rematerialisation; so a state that passes may still not fit.
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


def check(mesh, devices: int, state_per_device: int, state_total: int, param_bytes: int, pool: int | None) -> None:
    """Refuses a `mesh` whose state and gradients per device exceed `pool`, naming the fsdp count that fits."""
    need = state_per_device + param_bytes * state_per_device // state_total  # gradients lie as the parameters do
    if pool is None or need <= pool:
        return
    fits = _fsdp_counts(mesh.fsdp, devices, state_total + param_bytes, pool)
    if fits:
        fix = f"--mesh fsdp:{fits[0]} would need about {size((state_total + param_bytes) / fits[0])}"
    else:
        job = "the job's one device" if devices == 1 else f"the job's {devices} devices"
        fix = f"no fsdp count over {job} fits it: use more devices, a smaller model or bf16"
    raise UsageError(
        f"the train state and its gradients need {size(need)} per device under --mesh {mesh} (activations not "
        f"counted) but a device has {size(pool)}; {fix}"
    )


def size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"
