"""How the train state lies on the devices under a --mesh that shards it (plan/mesh.py says which dimension
of an array each axis splits): the devices as a data × fsdp × tensor grid, one sharding per array of
the state, and the constraints that keep a step's new state where they say. parallel.Sharded uses them;
plan/fit.py counts the same shards' bytes without JAX.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan.fit import OPTIMIZER
from dali_launch.trainer.plan.mesh import fsdp_dimension, tensor_dimension

HOST = "pinned_host"  # where --offload keeps the optimizer's state: the host's page-locked memory


def keeping(call, shardings: list, data_sharding):
    """`call` whose new state keeps its `shardings` (one per array, in leaf order) and whose tally stays
    split over the devices: constraints inside the program, as a tree of shardings given to jit would have
    to match the state's functions too. Arrays laid out in host memory (--offload) come to the devices for
    the call's steps and go back after them: one round trip a device call, whatever its steps."""

    def constrained(state, tally, *batch):
        state = each(state, shardings, lambda x, at: jax.device_put(x, on_device(at)) if at.memory_kind == HOST else x)
        state, tally = call(state, tally, *batch)
        state = each(state, shardings, _kept)
        return state, jax.lax.with_sharding_constraint(tally, data_sharding)

    return constrained


def each(tree, shardings: list, fn):
    """`fn(leaf, its sharding)` over a state's arrays, `shardings` in their leaf order."""
    leaves, structure = jax.tree.flatten(tree)
    return structure.unflatten([fn(x, at) for x, at in zip(leaves, shardings)])


def _kept(x, at):
    """A new state's array, put where `at` says: host memory by a transfer, on the devices by a constraint."""
    return jax.device_put(x, at) if at.memory_kind == HOST else jax.lax.with_sharding_constraint(x, at)


def on_device(at):
    """`at` in the devices' own memory."""
    return at.with_memory_kind("device")


def device_grid(devices: list, mesh) -> jax.sharding.Mesh:
    """The job's devices, in the data side's order, as a data × fsdp × tensor grid: a tensor group is
    consecutive devices (a process's, where it divides them), then an fsdp group."""
    return jax.sharding.Mesh(np.array(devices).reshape(mesh.data, mesh.fsdp, mesh.tensor), ("data", "fsdp", "tensor"))


def state_shardings(shapes, grid: jax.sharding.Mesh, offload: bool = False) -> list:
    """The sharding of each of the train state's arrays (in leaf order) on `grid`: its tensor dimension
    (mesh.tensor_dimension, read from its path) split over the tensor axis, its fsdp dimension
    (mesh.fsdp_dimension, another one) over the fsdp axis, whole along the data axis (one copy per group);
    `offload`: the optimizer's state in host memory (HOST), laid out the same."""
    fsdp, tensor = grid.shape["fsdp"], grid.shape["tensor"]

    def one(path, leaf):
        axes, name = [None] * len(leaf.shape), jax.tree_util.keystr(path, simple=True, separator="/")
        across = tensor_dimension(name, tuple(leaf.shape), tensor)
        if across is not None:
            axes[across] = "tensor"
        within = fsdp_dimension(tuple(leaf.shape), fsdp, taken=across)
        if within is not None:
            axes[within] = "fsdp"
        at = jax.sharding.NamedSharding(grid, P(*axes))
        return at.with_memory_kind(HOST) if offload and name.startswith(OPTIMIZER) else at

    shardings = [one(path, leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]]
    if tensor > 1 and not any("tensor" in at.spec for at in shardings):
        raise UsageError(
            f"--mesh tensor:{tensor} splits attention projections (nn.MultiHeadDotProductAttention's) and MLP blocks "
            "(an MlpBlock's Dense_0 and Dense_1) by heads or units that the count divides, and this model has none; "
            "use the fsdp axis instead, or name its layers so (plan/mesh.py)"
        )
    return shardings


def held_bytes(tree) -> int:
    """The bytes of `tree` this process holds, each distinct piece of an array once (a copy on each of its
    devices counted once): what a restore read here."""
    total = 0
    for x in jax.tree.leaves(tree):
        if isinstance(x, jax.Array):
            pieces = {tuple((i.start, i.stop) for i in s.index): s.data.nbytes for s in x.addressable_shards}
            total += sum(pieces.values())
        else:
            total += np.asarray(x).nbytes
    return total
