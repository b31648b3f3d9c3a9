"""The one-row-per-device layout that batches, tallies and pmapped states share, without DALI: the step
modules (step/parallel.py) import it, so they run where DALI is not installed (benchmarks/nnx_step.py
on the GPU machine). data/dali.py re-exports both names."""

from __future__ import annotations

import jax

AXIS = "devices"  # the pmap axis name and the mesh axis name


def first_row(tree):
    """This process's first device's row of a pytree laid out one row per device (device arrays)."""
    return jax.tree.map(lambda x: x.addressable_data(0)[0], tree)


def laid_out(shape, dtype, sharding: jax.sharding.NamedSharding) -> jax.ShapeDtypeStruct:
    """An abstract job-wide array of one `shape` row per device of `sharding`'s mesh, as DeviceBatches lays
    batches and tallies (data/expected.py's batch, compiled before the pipelines exist)."""
    return jax.ShapeDtypeStruct((sharding.mesh.devices.size, *shape), dtype, sharding=sharding)
