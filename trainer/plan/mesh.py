"""--mesh: how the job's devices split the work, data × fsdp × tensor.

    data    replicas: each group of devices holds a whole copy of the train state
    fsdp    within a group the train state is sharded (ZeRO-3, as MaxText's and big_vision's `fsdp`
            axis): each array's largest dimension that divides is split over the group's devices, XLA
            gathers the parameters for the forward pass and reduce-scatters the gradients
    tensor  Megatron's split of a transformer block (TENSOR_RULES): attention by heads, the MLP by its
            hidden units, so each device computes its part of every sample's block and XLA all-reduces
            the block's output over the group; the group's devices are adjacent (a node's, over NVLink)

Every device still reads its own global shard of the data (the batch is split over all the devices, as
without a mesh): a tensor group gathers its devices' rows inside the step, so each of its devices sees
the group's rows, and the SGD steps are those of data parallelism: the same samples, the same sums,
only the layout differs. A checkpoint holds the state as it lies, each process writing its own shards
(`Sharded.saved`), and restores on any mesh (read into host arrays, then placed); the evaluation takes
it gathered whole (`Sharded.replica`).

Light: no JAX at import, the launcher parses and checks the setting before any job is queued.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

AXES = ("data", "fsdp", "tensor")
FSDP_MIN_ELEMENTS = 1 << 14  # smaller arrays (biases, norms) stay whole: gathering them costs more than they weigh
# (a parameter's path, as "/".join of its keys, searched; the dimension the tensor axis splits, from the end) in
# the names Flax gives: nn.MultiHeadDotProductAttention's projections by heads ((embed, heads, head_dim) in,
# (heads, head_dim, embed) out), an `MlpBlock`'s first Dense by its outputs and its second by its inputs
# (vit.py; a user's model that names its layers so is split the same way). The optimizer's moments carry the
# same path under their own prefix. The other arrays are whole on a tensor group (FSDP may still split them).
TENSOR_RULES = (
    (re.compile(r"MultiHeadDotProductAttention_\d+/(query|key|value)/(kernel|bias)$"), -2),
    (re.compile(r"MultiHeadDotProductAttention_\d+/out/kernel$"), -3),
    (re.compile(r"MlpBlock_\d+/Dense_0/(kernel|bias)$"), -1),
    (re.compile(r"MlpBlock_\d+/Dense_1/kernel$"), -2),
)


@dataclass(frozen=True)
class Mesh:
    """Device counts along each axis; their product is the job's device count."""

    data: int = 1
    fsdp: int = 1
    tensor: int = 1

    @property
    def devices(self) -> int:
        return self.data * self.fsdp * self.tensor

    @property
    def shards_state(self) -> bool:
        return self.fsdp > 1 or self.tensor > 1

    def __str__(self) -> str:
        return ",".join(f"{axis}:{getattr(self, axis)}" for axis in AXES if getattr(self, axis) > 1) or "data:1"


def parse(setting: str) -> Mesh | None:
    """--mesh as given: None for auto, else the axes' counts (an axis left out counts 1)."""
    if setting == "auto":
        return None
    sizes = {}
    for part in setting.split(","):
        axis, _, count = part.strip().partition(":")
        if axis not in AXES or not count.isdigit() or int(count) < 1 or axis in sizes:
            raise ValueError(
                f"--mesh {setting!r}: each part is AXIS:COUNT, once each, AXIS one of {', '.join(AXES)} and COUNT "
                "a positive integer (e.g. --mesh data:2,fsdp:4), or auto"
            )
        sizes[axis] = int(count)
    return Mesh(**sizes)


def for_job(setting: str, devices: int) -> Mesh:
    """--mesh for a job of `devices`: auto is data parallel over all of them (where the state does not fit
    a device, plan/fit.py shards it). A mesh without a data count takes the devices the others
    leave (fsdp:4 on 8 devices: data:2,fsdp:4, as MaxText's -1); one whose product is not `devices` is refused."""
    mesh = parse(setting)
    if mesh is None:
        return Mesh(data=devices)
    if "data:" not in setting and devices % mesh.devices == 0:
        mesh = Mesh(data=devices // mesh.devices, fsdp=mesh.fsdp, tensor=mesh.tensor)
    if mesh.devices != devices:
        raise ValueError(
            f"--mesh {setting} spans {mesh.devices} devices but the job has {devices}; make the product of its "
            f"counts {devices} (or a divisor of it, without a data count), or use --mesh auto"
        )
    return mesh


def fsdp_dimension(shape: tuple[int, ...], fsdp: int, taken: int | None = None) -> int | None:
    """The dimension of an array of `shape` that --mesh's fsdp axis splits: its largest one that `fsdp`
    divides, other than `taken` (the tensor axis's), for an array of FSDP_MIN_ELEMENTS or more; None: the
    array stays whole on every device of its group."""
    size = 1
    for n in shape:
        size *= n
    if fsdp == 1 or size < FSDP_MIN_ELEMENTS:
        return None
    fits = [i for i, n in enumerate(shape) if n % fsdp == 0 and i != taken]
    return max(fits, key=lambda i: shape[i]) if fits else None


def tensor_dimension(path: str, shape: tuple[int, ...], tensor: int) -> int | None:
    """The dimension of the array at `path` that --mesh's tensor axis splits (TENSOR_RULES), where `tensor`
    divides it; None: whole on every device of a tensor group."""
    if tensor == 1:
        return None
    for rule, from_end in TENSOR_RULES:
        if rule.search(path) and len(shape) >= -from_end and shape[from_end] % tensor == 0:
            return len(shape) + from_end
    return None
