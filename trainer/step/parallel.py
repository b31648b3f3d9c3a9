"""The SGD steps, and the two ways of running them on every device of every process (--parallel).

    pmap     one replica of the state per device; each device's program sees its own rows and sums
             losses and gradients over the job with `lax.psum`.
    sharded  one jit program over a job-wide mesh: the state is replicated (or, under --mesh with an
             fsdp axis, sharded: step/mesh.py), the batch is split over the devices by its NamedSharding,
             and XLA inserts the all-reduce (the gathers and reduce-scatters) itself.

Both take the same device call (DALI batch (devices, rows, ...), rows = --steps-per-call steps of
--batch-size, and its `valid` mask, which the data side computes for either --sample-order) and make the same SGD steps: step j is rows [j*B, (j+1)*B) of every device, the loss
is summed over the step's real samples of the whole job and divided by their count, so padding
never counts and every replica applies the same update (state.py: the optimizer, accumulation, EMA;
mixing.py: --mixup and --cutmix, on each device's batch of a step).
A model's mutable collections (BatchNorm statistics) are averaged over the job after every step:
under pmap each device computed its own; under jit the batch is one job-wide array, so they are
the job's already and the average is the identity.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import jax_utils
from jax.sharding import PartitionSpec as P

from dali_launch.trainer.data import label_check
from dali_launch.trainer.data.rows import AXIS, first_row
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.step import memory_fit, mixing
from dali_launch.trainer.step.layout import HOST, device_grid, each, laid_out, on_device, state_layout
from dali_launch.trainer.step.mesh import Mesh
from dali_launch.trainer.step.runner import Runner


@dataclass(frozen=True)
class Job:
    """How a step's program sees the job: `sum` over every device (psum under pmap; nothing under jit,
    whose arrays are already job-wide) and `index`, this device's global index (0 under jit: one
    program sees every row); `devices`: the devices' batches its rows hold (jit: the job's, end to end)."""

    sum: Callable
    index: Callable
    devices: int = 1

    def mean(self, x):
        return self.sum(x) / self.sum(jnp.ones((), x.dtype))


PMAP_JOB = Job(partial(jax.lax.psum, axis_name=AXIS), partial(jax.lax.axis_index, AXIS))
JIT_JOB = Job(lambda x: x, lambda: 0)


def sgd_step(state, images, labels, valid, job: Job):
    """One SGD step on one batch (state.py applies it); the loss is the job's sum over real samples."""
    key, recipe, goal = state.dropout_key(job.index()), state.recipe, None
    if recipe.mixing.on:  # the images change before the forward pass, the targets with them
        goal = smoothed(recipe, targets(labels, recipe.num_classes, mixes=True))
        images, goal = mixed(state, images, goal, job)

    def loss_sum(params):
        logits, collections = state.forward({"params": params, **state.collections}, images, True, key)
        goal_ = goal if goal is not None else smoothed(recipe, targets(labels, logits.shape[-1]))
        return jnp.sum(optax.softmax_cross_entropy(logits, goal_) * valid), collections

    (loss, collections), grads = jax.value_and_grad(loss_sum, has_aux=True)(state.params)
    count, loss, grads = job.sum(jnp.sum(valid)), job.sum(loss), jax.tree.map(job.sum, grads)
    # BatchNorm statistics (any mutable collection) averaged over every device: replicas stay identical.
    collections = jax.tree.map(job.mean, collections)
    skipped = jnp.zeros((), jnp.float32)
    if state.recipe.skip_nonfinite:  # --on-nan skip-step: the job-wide sums decide, alike on every device
        finite = jnp.isfinite(loss) & jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
        grads = jax.tree.map(lambda g: jnp.where(finite, g, 0), grads)
        # A step of no samples is no step (state.learn): no update, no statistics, no momentum
        loss, count, skipped = jnp.where(finite, loss, 0), jnp.where(finite, count, 0), 1 - finite.astype(jnp.float32)
    return state.learn(grads, count, collections), loss, count, skipped


def targets(labels, num_classes: int, mixes: bool = False):
    """One-hot targets: float labels are used as they are, integer class ids are one-hot encoded here."""
    if labels.dtype.kind == "f":
        if labels.shape[-1] != num_classes:  # found while tracing: shapes are static
            given, fix = (
                f"float labels (one-hot or soft targets) {labels.shape[-1]} wide",
                f"make them {num_classes} wide",
            )
            if mixes:  # mixing comes first, before the model could say so
                raise UsageError(
                    f"--mixup/--cutmix mix targets {num_classes} wide (--num-classes {num_classes}), but the pipeline "
                    f"gave {given}; {fix}, or give class ids"
                )
            raise UsageError(f"the pipeline gave {given} but --num-classes is {num_classes}; {fix}, or give class ids")
        return labels
    return jax.nn.one_hot(labels.reshape(labels.shape[0]), num_classes)


def smoothed(recipe, goal):
    """--label-smoothing, before any mixing (timm's order)."""
    return optax.smooth_labels(goal, recipe.label_smoothing) if recipe.label_smoothing else goal


def mixed(state, images, goal, job: Job):
    """--mixup/--cutmix on each device's batch, keyed by that device's dropout key of the step (mixing.py)."""
    key = lambda device: jax.random.fold_in(state.dropout_key(device), mixing.STREAM)
    if job.devices == 1:
        return mixing.mix(key(job.index()), images, goal, state.recipe.mixing)
    keys = jax.vmap(key)(jnp.arange(job.devices))
    return mixing.mix_devices(keys, images, goal, state.recipe.mixing)


def sgd_steps(state, images, labels, valid, job: Job):
    """Steps over a leading `steps` axis, fused by `lax.scan`: the host dispatches once per DALI batch.
    Returns the state and the loss, sample and skipped-step sums of all of them."""
    if images.shape[0] == 1:  # XLA:CPU runs convolutions inside a scan ~15x slower (a CNN: 60 vs 1,250 images/s)
        return sgd_step(state, images[0], labels[0], valid[0], job)

    def one(carry, batch):
        state, *sums = carry
        state, *step = sgd_step(state, *batch, job)
        return (state, *(a + b for a, b in zip(sums, step))), None

    zero = jnp.zeros((), jnp.float32)
    (state, loss, count, skipped), _ = jax.lax.scan(one, (state, zero, zero, zero), (images, labels, valid))
    return state, loss, count, skipped


def advance(tally, rows_per_reader: int, loss, count, skipped, labels) -> dict:
    """The epoch's running tally after a call: each reader's position in its shard, loss and sample sums,
    the steps --on-nan skip-step dropped, and the range of class ids seen (label_check.py)."""
    return {
        "position": tally["position"] + rows_per_reader,
        "loss": tally["loss"] + loss,
        "count": tally["count"] + count,
        "skipped": tally["skipped"] + skipped,
        "labels": labels,
    }


def sample_order(x, readers: int):
    """A device's rows in sample order: its readers' rows taken in turn (reader r's i-th row is the
    device's sample i*R + r), so the samples of SGD step j do not depend on --steps-per-call (a call
    holds each reader's rows end to end; DALI reads that way)."""
    if readers == 1:
        return x
    return x.reshape(readers, -1, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)


def pmap_call(state, tally, images, labels, valid, batch_size: int, readers: int):
    """One device's view of a call (pmap): images (rows, ...), valid (rows,): 1 for real samples, 0 for padding."""
    rows = images.shape[0] // readers
    steps = lambda x: sample_order(x, readers).reshape(-1, batch_size, *x.shape[1:])
    state, loss, count, skipped = sgd_steps(state, steps(images), steps(labels), steps(valid), PMAP_JOB)
    return state, advance(tally, rows, loss, count, skipped, label_check.fold(tally["labels"], labels))


def sharded_call(state, tally, images, labels, valid, batch_size: int, readers: int, rows_at=None):
    """The whole job's view of a call (jit): images (devices, rows, ...), valid (devices, rows). `rows_at`: where
    a step's rows lie (a mesh with a tensor axis: each tensor group's rows on each of its devices)."""
    rows = images.shape[1] // readers

    def steps(x):  # (devices, k*B, ...) -> (k, devices*B, ...): step j takes samples j*B.. of every device
        x = jax.vmap(partial(sample_order, readers=readers))(x)
        per_step = x.reshape(x.shape[0], -1, batch_size, *x.shape[2:]).swapaxes(0, 1)
        per_step = per_step.reshape(per_step.shape[0], -1, *x.shape[2:])
        return per_step if rows_at is None else jax.lax.with_sharding_constraint(per_step, rows_at)

    job = replace(JIT_JOB, devices=images.shape[0])  # each device's rows mix among themselves
    state, loss, count, skipped = sgd_steps(state, steps(images), steps(labels), steps(valid), job)
    seen = jax.vmap(label_check.fold)(tally["labels"], labels)  # per device, as the tally: no collective
    return state, advance(tally, rows, loss, count, skipped, seen)


class Pmap:
    """--parallel pmap: the state stacked over devices, one copy per device (a Runner)."""

    name = "pmap"
    buffers = None  # compiled at its first call: no count ahead of it
    offload = sharded = False  # one whole state per device (the launcher refuses --offload optimizer here)

    def __init__(self, devices: list, all_devices: list, batch_size: int, readers: int, donate=True):
        self.devices, self.batch_size = devices, batch_size
        call = partial(pmap_call, batch_size=batch_size, readers=readers)
        self.call = jax.pmap(call, AXIS, devices=all_devices, donate_argnums=(0, 1) if donate else ())

    def compile_ahead(self, shapes, *args) -> threading.Thread:
        return finished()  # pmap compiles at its first call: its ahead-of-time program is not the one it calls

    def buffers_at(self, batch: int) -> None:
        return None

    def sharded_shapes(self, shapes) -> None:
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

    def device_bytes(self, shapes) -> int:
        return state_bytes(shapes)

    def host_bytes(self, shapes) -> int:
        return 0


class Sharded:
    """--parallel sharded: one jit program for all devices (a Runner). The batch's `data_sharding` (the data
    side's) names the devices; `mesh` (step/mesh.py) says how the train state lies on them: replicated, or
    sharded over its fsdp axis (`shapes`: the state's abstract arrays, which the layout is read from)."""

    name = "sharded"

    def __init__(
        self, data_sharding, batch_size: int, readers: int, donate=True, mesh=None, shapes=None, offload=False
    ):
        self.replicated = jax.sharding.NamedSharding(data_sharding.mesh, jax.sharding.PartitionSpec())
        self.sharded, self.offload = mesh is not None and mesh.shards_state, offload
        self.data_sharding, self.readers, self.donate, self.batch_size = data_sharding, readers, donate, batch_size
        self.rows_at = self.layout = None
        if self.sharded or offload:  # one sharding per array, in the state's leaf order (its functions differ)
            devices = list(data_sharding.mesh.devices.flat)
            grid = device_grid(devices, mesh if self.sharded else Mesh(data=len(devices)))
            self.layout = state_layout(shapes, grid, offload)
            if self.sharded and mesh.tensor > 1:
                self.rows_at = jax.sharding.NamedSharding(grid, P(None, ("data", "fsdp")))
        self.call = self._jit(batch_size)
        self._whole = jax.jit(lambda tree: tree, out_shardings=self.replicated)
        self.buffers = None  # (arguments, temporaries) of the compiled call, once compile_ahead has them
        self._ahead = None  # what compile_ahead compiled for: (the state's shapes, the other arguments)

    def _jit(self, batch_size: int):
        """The device call of `batch_size` samples per device and step, jitted."""
        call = partial(sharded_call, batch_size=batch_size, readers=self.readers, rows_at=self.rows_at)
        donated = (0, 1) if self.donate else ()  # the state and tally are replaced: reuse their buffers
        if self.layout:
            return jax.jit(laid_out(call, self.layout, self.data_sharding), donate_argnums=donated)
        return jax.jit(call, donate_argnums=donated, out_shardings=(self.replicated, self.data_sharding))

    def compile_ahead(self, shapes, *args) -> threading.Thread:
        """Compiles `call` for a state of these `shapes` and these other arguments, in a thread (into
        XLA's persistent cache, where the real call finds it), and keeps its buffers' bytes on a device
        (`buffers`, memory_fit.step_buffers); a failure here is the real call's to report."""
        abstract = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        self._ahead = (shapes, jax.tree.map(abstract, args))  # shapes only: no batch kept on the devices
        host = self.host_bytes(shapes)

        def compile_() -> None:
            with contextlib.suppress(Exception):
                self.buffers = memory_fit.step_buffers(self.call.lower(self._abstract(shapes), *args).compile(), host)

        thread = threading.Thread(target=compile_, name="dali-launch-compile-ahead", daemon=True)
        thread.start()
        return thread

    def buffers_at(self, batch: int) -> tuple[int, int] | None:
        """`buffers` of the call compile_ahead compiled, at `batch` samples per device and step instead (as many
        steps a call): compiled now, for memory_fit.check_step's word on a smaller batch."""
        shapes, (tally, *rows) = self._ahead
        scaled = [
            jax.ShapeDtypeStruct(
                (x.shape[0], x.shape[1] // self.batch_size * batch, *x.shape[2:]), x.dtype, sharding=x.sharding
            )
            for x in rows
        ]
        try:
            compiled = self._jit(batch).lower(self._abstract(shapes), tally, *scaled).compile()
            return memory_fit.step_buffers(compiled, self.host_bytes(shapes))
        except Exception:  # a batch the call cannot take (the readers' split): no second point
            return None

    def _abstract(self, shapes):
        return self._each(lambda s, at: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=at), shapes)

    def _each(self, fn, tree):
        """`fn(leaf, its sharding)` over a state's arrays (layout.each; replicated without a layout)."""
        return each(tree, self.layout or [self.replicated] * len(jax.tree.leaves(tree)), fn)

    def sharded_shapes(self, shapes):
        """(Orbax restores into the devices' memory; `place` moves what --offload keeps to the host.)"""
        at_devices = lambda s, at: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=on_device(at))
        return self._each(at_devices, shapes) if self.sharded else None

    def place(self, state):
        """Every process holds the same host state; each puts its part of every array on its own devices. An
        array restored as laid out (sharded_shapes) stays as it is."""

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

    def device_bytes(self, shapes) -> int:
        """Each array's shard on one device (shard_shape: the largest, where a dimension splits unevenly)."""
        return self._bytes(shapes, lambda at: at.memory_kind != HOST)

    def host_bytes(self, shapes) -> int:
        return self._bytes(shapes, lambda at: at.memory_kind == HOST)

    def _bytes(self, shapes, where) -> int:
        leaves = jax.tree.leaves(shapes)
        layout = self.layout or [self.replicated] * len(leaves)
        return sum(math.prod(at.shard_shape(x.shape)) * x.dtype.itemsize for x, at in zip(leaves, layout) if where(at))


def state_bytes(shapes) -> int:
    """The train state's bytes (parameters, optimizer state, statistics, EMA), from its abstract shapes."""
    return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(shapes) if hasattr(leaf, "dtype"))


def call_tally(tally: dict) -> dict:
    """What device calls carry: an epoch's `tally` as a checkpoint holds it (checkpoint.zero_tally at the
    epoch's start), the steps --on-nan skip-step dropped since the task started the epoch, and the labels'
    range, which is checked before every checkpoint; neither is in one (checkpoints keep their old format)."""
    return {**tally, "skipped": np.zeros((), np.float32), "labels": label_check.none()}


def finished() -> threading.Thread:
    """A thread that has nothing to do: joined at once."""
    thread = threading.Thread()
    thread.start()
    return thread


def create(
    name: str,
    devices: list,
    all_devices: list,
    batch_size: int,
    data_sharding,
    readers: int = 1,
    donate=True,
    mesh=None,
    shapes=None,
    offload=False,
) -> Runner:
    """The --parallel runner `name` (pmap or sharded, resolve.parallel); `mesh` and the state's `shapes` lay
    out a sharded runner's state (step/mesh.py), `offload` its optimizer's state in host memory (--offload);
    `donate` False only for benchmarks/step_levers.py's lever."""
    if name == Pmap.name:
        return Pmap(devices, all_devices, batch_size, readers, donate)
    return Sharded(data_sharding, batch_size, readers, donate, mesh, shapes, offload)
