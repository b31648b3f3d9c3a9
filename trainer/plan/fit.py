"""Whether the train state and its gradients fit each device, as arithmetic on the state's shapes: what the step
plan weighs for --mesh auto and --offload auto, and refuses a mesh by, before anything is placed.

The state as laid out (parameters, optimizer state, EMA, statistics) is counted per device from each array's
shape and the axes that split it (plan/mesh.py's rules: an fsdp dimension, a tensor dimension), the optimizer's
state kept in host memory under --offload; the gradients are the parameters' bytes in the state's proportion per
device. Activations are not counted here: the compiled step's own count is checked once it has compiled
(step/compiled.py). The room is XLA's pool on the device (its `bytes_limit`); CPU devices do not say, and are
not checked unless DALI_LAUNCH_DEVICE_MEMORY_MB gives a pool (the test suite's stand-in for a GPU's memory).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan.mesh import Mesh, fsdp_dimension, tensor_dimension

ENV = "DALI_LAUNCH_DEVICE_MEMORY_MB"
GIB, MIB = 1 << 30, 1 << 20
OPTIMIZER = "opt_state"  # the train state's field that --offload keeps in host memory


@dataclass(frozen=True)
class StateSize:
    """The train state's arrays as the plan weighs them: (path, shape, item size) each, in leaf order."""

    leaves: tuple[tuple[str, tuple[int, ...], int], ...]
    stateful: bool = False  # the model keeps mutable collections (BatchNorm statistics)

    @classmethod
    def of(cls, shapes) -> StateSize:
        """From a train state's abstract arrays (step/initial_state.py's `shapes`)."""
        import jax

        flat = jax.tree_util.tree_flatten_with_path(shapes)[0]
        named = lambda path: jax.tree_util.keystr(path, simple=True, separator="/")
        leaves = tuple((named(p), tuple(x.shape), x.dtype.itemsize) for p, x in flat if hasattr(x, "dtype"))
        return cls(leaves, bool(shapes.collections))

    @property
    def total(self) -> int:
        return sum(_bytes(shape, item) for _, shape, item in self.leaves)

    @property
    def params(self) -> int:
        return sum(_bytes(shape, item) for path, shape, item in self.leaves if path.startswith("params"))

    def on_device(self, mesh: Mesh, offload: bool = False) -> int:
        """The bytes one device holds (each array's largest shard), the optimizer's state elsewhere if `offload`."""
        return sum(_shard(path, shape, item, mesh) for path, shape, item in self.leaves if not _off(path, offload))

    def on_host(self, mesh: Mesh, offload: bool) -> int:
        """The bytes --offload keeps in host memory for one device instead."""
        return sum(_shard(path, shape, item, mesh) for path, shape, item in self.leaves if _off(path, offload))

    def need(self, mesh: Mesh, offload: bool = False) -> int:
        """The state's and its gradients' bytes on one device (gradients laid out as the parameters: the state's
        share of them)."""
        device = self.on_device(mesh, offload)
        laid_out = device + self.on_host(mesh, offload)
        return device + self.params * laid_out // max(1, self.total)


def _bytes(shape: tuple[int, ...], itemsize: int) -> int:
    n = itemsize
    for d in shape:
        n *= d
    return n


def _off(path: str, offload: bool) -> bool:
    return offload and path.startswith(OPTIMIZER)


def _shard(path: str, shape: tuple[int, ...], itemsize: int, mesh: Mesh) -> int:
    """One device's shard of an array, split as step/shardings.py lays it out."""
    if not mesh.shards_state:
        return _bytes(shape, itemsize)
    split = list(shape)
    across = tensor_dimension(path, shape, mesh.tensor)
    if across is not None:
        split[across] //= mesh.tensor
    within = fsdp_dimension(shape, mesh.fsdp, taken=across)
    if within is not None:
        split[within] //= mesh.fsdp
    return _bytes(tuple(split), itemsize)


def pool_bytes(device) -> int | None:
    """XLA's memory pool on `device` ($DALI_LAUNCH_DEVICE_MEMORY_MB where given), None where unknown."""
    given = os.environ.get(ENV)
    if given:
        return int(given) << 20
    stats = device.memory_stats() or {}  # CPU devices: None
    return stats.get("bytes_limit")


def fitting(mesh: Mesh, devices: int, size: StateSize, pool: int | None) -> Mesh:
    """--mesh auto's pick: `mesh` (data parallel) while its state and gradients fit `pool`, else the fewest
    fsdp devices that hold them (the smallest count divides a node's devices first), else `mesh` (`check`
    then says that nothing fits)."""
    whole = size.total + size.params
    if pool is None or whole <= pool:
        return mesh
    fits_ = _fsdp_counts(1, devices, whole, pool)
    return Mesh(data=devices // fits_[0], fsdp=fits_[0]) if fits_ else mesh


def _fsdp_counts(above: int, devices: int, whole: int, pool: int) -> list[int]:
    """The fsdp counts above `above` that divide `devices` and fit `whole` bytes split over them into `pool`."""
    return [k for k in range(above + 1, devices + 1) if devices % k == 0 and whole / k <= pool]


def fits(need_bytes: int, pool: int | None) -> bool:
    return pool is None or need_bytes <= pool


def check(mesh: Mesh, devices: int, size: StateSize, offload: bool, pool: int | None) -> None:
    """Refuses a `mesh` whose state and gradients per device exceed `pool`, naming the fsdp count that fits."""
    need = size.need(mesh, offload)
    if fits(need, pool):
        return
    whole = size.total + size.params
    counts = _fsdp_counts(mesh.fsdp, devices, whole, pool)
    if counts:
        fix = f"--mesh fsdp:{counts[0]} would need about {size_words(whole / counts[0])}"
    else:  # the mesh that would: fsdp over the fewest devices that hold it, more than the job has
        job = "the job's one device" if devices == 1 else f"the job's {devices} devices"
        least = math.ceil(whole / pool)
        fix = (
            f"no fsdp count over {job} fits it; --mesh fsdp:{least} over {least} devices would need about "
            f"{size_words(whole / least)} each (more --nodes or --gpus-per-node), or use a smaller model or bf16"
        )
    raise UsageError(
        f"the train state and its gradients need {size_words(need)} per device under --mesh {mesh} (activations not "
        f"counted) but a device has {size_words(pool)}; {fix}"
    )


def size_words(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"
