"""How device calls run on every device of every process (--parallel): the two `Runner`s.

    pmap     one replica of the state per device; each device's program sees its own rows and sums
             losses and gradients over the job with `lax.psum`.
    sharded  one jit program over a job-wide mesh: the state is replicated (or, under --mesh with an
             fsdp or tensor axis, sharded: plan/mesh.py, step/shardings.py), the batch is split over the
             devices by its NamedSharding, and XLA inserts the all-reduce (the gathers and reduce-scatters).

Both run the same SGD steps (step/sgd.py) on the same device call. How the state is partitioned, and so which
runner, the step plan decides (plan/step.py); a runner only builds and runs what it was given.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import NamedTuple

import jax
import numpy as np
from flax import jax_utils
from jax.sharding import PartitionSpec as P

from dali_launch.trainer.data.rows import AXIS, first_row
from dali_launch.trainer.plan.mesh import Mesh
from dali_launch.trainer.step.runner import Runner
from dali_launch.trainer.step.sgd import pmap_call, sharded_call
from dali_launch.trainer.step.shardings import device_grid, each, keeping, on_device, state_shardings


class Pmap:
    """--parallel pmap: the state stacked over devices, one copy per device (a Runner)."""

    name = "pmap"
    sharded = False  # one whole state per device

    def __init__(self, devices: list, all_devices: list, batch_size: int, readers: int, donate=True):
        self.devices, self.batch_size = devices, batch_size
        call = partial(pmap_call, batch_size=batch_size, readers=readers)
        self.call = jax.pmap(call, AXIS, devices=all_devices, donate_argnums=(0, 1) if donate else ())

    def compile(self, shapes, *args, batch_size: int | None = None) -> None:
        return None  # pmap compiles at its first call: its ahead-of-time program is not the one it calls

    def restore_shapes(self, shapes) -> None:
        return None  # every device holds a whole copy: read whole

    def place(self, state):
        return jax_utils.replicate(state, devices=self.devices)

    def replica(self, tree):
        """This process's first device's copy (device arrays)."""
        return first_row(tree)

    def whole(self, tree):
        return tree  # every device holds its own whole copy

    def saved(self, state):
        return self.replica(state)


class Spread(NamedTuple):
    """How a sharded runner spreads the train state over the devices: the `mesh` (plan/mesh.py: replicated, or
    sharded over its fsdp and tensor axes), the state's abstract arrays (`shapes`, which each array's sharding is
    read from), and whether the optimizer's state stays in host memory (`offload`)."""

    mesh: Mesh | None = None
    shapes: object = None
    offload: bool = False


class Sharded:
    """--parallel sharded: one jit program for all devices (a Runner). The batch's `data_sharding` (the data
    side's) names the devices; `spread` how the train state lies on them (replicated without one)."""

    name = "sharded"

    def __init__(self, data_sharding, batch_size: int, readers: int, spread: Spread = None, donate=True):
        mesh, shapes, offload = spread or Spread()
        self.replicated = jax.sharding.NamedSharding(data_sharding.mesh, jax.sharding.PartitionSpec())
        self.sharded = mesh is not None and mesh.shards_state
        self.data_sharding, self.readers, self.donate, self.batch_size = data_sharding, readers, donate, batch_size
        self.rows_at = self.shardings = None
        if self.sharded or offload:  # one sharding per array, in the state's leaf order (its functions differ)
            devices = list(data_sharding.mesh.devices.flat)
            grid = device_grid(devices, mesh if self.sharded else Mesh(data=len(devices)))
            self.shardings = state_shardings(shapes, grid, offload)
            if self.sharded and mesh.tensor > 1:
                self.rows_at = jax.sharding.NamedSharding(grid, P(None, ("data", "fsdp")))
        self.call = self._jit(batch_size)
        self._whole = jax.jit(lambda tree: tree, out_shardings=self.replicated)

    def _jit(self, batch_size: int):
        """The device call of `batch_size` samples per device and step, jitted."""
        call = partial(sharded_call, batch_size=batch_size, readers=self.readers, rows_at=self.rows_at)
        donated = (0, 1) if self.donate else ()  # the state and tally are replaced: reuse their buffers
        if self.shardings:
            return jax.jit(keeping(call, self.shardings, self.data_sharding), donate_argnums=donated)
        return jax.jit(call, donate_argnums=donated, out_shardings=(self.replicated, self.data_sharding))

    def compile(self, shapes, *args, batch_size: int | None = None):
        """`call` (at `batch_size` samples per device and step instead, as many steps a call) compiled for a state
        of these abstract `shapes` and these other arguments, into XLA's persistent cache (step/compiled.py)."""
        jitted = self.call if batch_size in (None, self.batch_size) else self._jit(batch_size)
        return jitted.lower(self._abstract(shapes), *args).compile()

    def _abstract(self, shapes):
        return self._each(lambda s, at: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=at), shapes)

    def _each(self, fn, tree):
        """`fn(leaf, its sharding)` over a state's arrays (shardings.each; replicated without shardings)."""
        return each(tree, self.shardings or [self.replicated] * len(jax.tree.leaves(tree)), fn)

    def restore_shapes(self, shapes):
        """A sharded state's abstract arrays as they lie on the devices (their shardings, in the devices' own
        memory: Orbax restores there; `place` moves what --offload keeps to the host): what a checkpoint is
        restored into (each process reads its own shards) and what the evaluation applies as it lies. None where
        each device holds the state whole."""
        at_devices = lambda s, at: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=on_device(at))
        return self._each(at_devices, shapes) if self.sharded else None

    def place(self, state):
        """Every process holds the same host state; each puts its part of every array on its own devices. An
        array restored as laid out (restore_shapes) stays as it is."""

        def put(x, at):
            if isinstance(x, jax.Array) and x.sharding == at:  # restored as laid out
                return x
            if isinstance(x, jax.Array) and not x.is_fully_addressable:  # restored sharded, for --offload's host memory
                return jax.device_put(x, at)
            x = np.asarray(x)  # a fresh state (on this process's CPU), a host restore
            return jax.make_array_from_callback(x.shape, at, lambda index: x[index])

        return self._each(put, state)

    def replica(self, tree):
        """One whole copy of `tree` on this process's first device; a sharded state is gathered first (what
        checkpoints and the evaluation take: a state of any mesh)."""
        return jax.tree.map(lambda x: x.addressable_data(0), self.whole(tree))

    def whole(self, tree):
        return self._whole(tree) if self.sharded else tree

    def saved(self, state):
        """A sharded state as it lies, each process writing its own shards (gathered whole to one device, a
        state that only fits sharded could not be checkpointed); a replicated one, one replica."""
        return state if self.sharded else self.replica(state)


def finished() -> threading.Thread:
    """A thread that has nothing to do: joined at once."""
    thread = threading.Thread()
    thread.start()
    return thread


class How(NamedTuple):
    """How a runner's device calls run beside their batch: the pipelines per device whose rows a call holds end to
    end (`readers`), how a sharded runner spreads the train state (`spread`; a pmap one holds it whole), and whether
    a call donates the state's buffers (False only for benchmarks/step_levers.py's lever)."""

    readers: int = 1
    spread: Spread = Spread()
    donate: bool = True


def create(name: str, devices: list, all_devices: list, batch_size: int, data_sharding, how: How = How()) -> Runner:
    """The --parallel runner `name` (pmap or sharded: the step plan's partition) of `batch_size` samples per device
    and step, the batch laid out by `data_sharding`."""
    if name == Pmap.name:
        return Pmap(devices, all_devices, batch_size, how.readers, how.donate)
    return Sharded(data_sharding, batch_size, how.readers, how.spread, how.donate)
