"""The SGD steps of one device call, as one device's program sees them (pmap) or the whole job's (jit).

A device call is a DALI batch (devices, rows, ...), rows = --steps-per-call steps of --batch-size, and its
`valid` mask, which the data side computes for either --sample-order. Step j is rows [j*B, (j+1)*B) of every
device; the loss is summed over the step's real samples of the whole job and divided by their count, so padding
never counts and every replica applies the same update (state.py: the optimizer, accumulation, EMA; mixing.py:
--mixup and --cutmix, on each device's batch of a step). A model's mutable collections (BatchNorm statistics)
are averaged over the job after every step: under pmap each device computed its own; under jit the batch is one
job-wide array, so they are the job's already and the average is the identity. step/parallel.py runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dali_launch.trainer.data import label_check
from dali_launch.trainer.data.rows import AXIS
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.step import mixing


@dataclass(frozen=True)
class JobView:
    """How a step's program sees the job: `sum` over every device (psum under pmap; nothing under jit,
    whose arrays are already job-wide) and `index`, this device's global index (0 under jit: one
    program sees every row); `devices`: the devices' batches its rows hold (jit: the job's, end to end)."""

    sum: Callable
    index: Callable
    devices: int = 1

    def mean(self, x):
        return self.sum(x) / self.sum(jnp.ones((), x.dtype))


PMAP_JOB = JobView(partial(jax.lax.psum, axis_name=AXIS), partial(jax.lax.axis_index, AXIS))
JIT_JOB = JobView(lambda x: x, lambda: 0)


def sgd_step(state, images, labels, valid, job: JobView):
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


def mixed(state, images, goal, job: JobView):
    """--mixup/--cutmix on each device's batch, keyed by that device's dropout key of the step (mixing.py)."""
    key = lambda device: jax.random.fold_in(state.dropout_key(device), mixing.STREAM)
    if job.devices == 1:
        return mixing.mix(key(job.index()), images, goal, state.recipe.mixing)
    keys = jax.vmap(key)(jnp.arange(job.devices))
    return mixing.mix_devices(keys, images, goal, state.recipe.mixing)


def sgd_steps(state, images, labels, valid, job: JobView):
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


def call_tally(tally: dict) -> dict:
    """What device calls carry: an epoch's `tally` as a checkpoint holds it (checkpoint.zero_tally at the
    epoch's start), the steps --on-nan skip-step dropped since the task started the epoch, and the labels'
    range, which is checked before every checkpoint; neither is in one (checkpoints keep their old format)."""
    return {**tally, "skipped": np.zeros((), np.float32), "labels": label_check.none()}
