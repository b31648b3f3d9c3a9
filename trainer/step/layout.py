"""How the train state lies on the devices under a --mesh that shards it (step/mesh.py says which dimension
of an array each axis splits): the devices as a data × fsdp × tensor grid, one sharding per array of
the state, and the constraints that keep a step's new state in that layout. parallel.Sharded uses them.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.step.mesh import fsdp_dimension, tensor_dimension


def laid_out(call, layout: list, data_sharding):
    """`call` whose new state keeps `layout` (one sharding per array, in leaf order) and whose tally stays
    split over the devices: constraints inside the program, as a tree of shardings given to jit would have
    to match the state's functions too."""

    def constrained(state, tally, *batch):
        state, tally = call(state, tally, *batch)
        leaves, structure = jax.tree.flatten(state)
        state = structure.unflatten([jax.lax.with_sharding_constraint(x, at) for x, at in zip(leaves, layout)])
        return state, jax.lax.with_sharding_constraint(tally, data_sharding)

    return constrained


def device_grid(devices: list, mesh) -> jax.sharding.Mesh:
    """The job's devices, in the data side's order, as a data × fsdp × tensor grid: a tensor group is
    consecutive devices (a process's, where it divides them), then an fsdp group."""
    return jax.sharding.Mesh(np.array(devices).reshape(mesh.data, mesh.fsdp, mesh.tensor), ("data", "fsdp", "tensor"))


def state_layout(shapes, grid: jax.sharding.Mesh) -> list:
    """The sharding of each of the train state's arrays (in leaf order) on `grid`: its tensor dimension
    (mesh.tensor_dimension, read from its path) split over the tensor axis, its fsdp dimension
    (mesh.fsdp_dimension, another one) over the fsdp axis, whole along the data axis (one copy per group)."""
    fsdp, tensor = grid.shape["fsdp"], grid.shape["tensor"]

    def one(path, leaf):
        axes = [None] * len(leaf.shape)
        across = tensor_dimension(jax.tree_util.keystr(path, simple=True, separator="/"), tuple(leaf.shape), tensor)
        if across is not None:
            axes[across] = "tensor"
        within = fsdp_dimension(tuple(leaf.shape), fsdp, taken=across)
        if within is not None:
            axes[within] = "fsdp"
        return jax.sharding.NamedSharding(grid, P(*axes))

    layout = [one(path, leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]]
    if tensor > 1 and not any("tensor" in at.spec for at in layout):
        raise UsageError(
            f"--mesh tensor:{tensor} splits attention projections (nn.MultiHeadDotProductAttention's) and MLP blocks "
            "(an MlpBlock's Dense_0 and Dense_1) by heads or units that the count divides, and this model has none; "
            "use the fsdp axis instead, or name its layers so (step/mesh.py)"
        )
    return layout
