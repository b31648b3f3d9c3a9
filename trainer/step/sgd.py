"""The SGD steps of one device call, as one device's program sees them (pmap) or the whole job's (jit).

A device call is a batch of the task's outputs, each (devices, rows, ...) with rows = --steps-per-call steps of
--batch-size, and its `valid` mask, which the data side computes for either --sample-order. Step j is rows
[j*B, (j+1)*B) of every device; the task's loss (tasks/contract.py) is summed over the step's real samples of
the whole job and divided by their count, so padding never counts and every replica applies the same update
(state.py: the optimizer, accumulation, EMA). A model's mutable collections (BatchNorm statistics) are averaged
over the job after every step: under pmap each device computed its own; under jit the batch is one job-wide
array, so they are the job's already and the average is the identity. step/parallel.py runs them.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.step import view
from dali_launch.trainer.step.view import JIT_JOB, PMAP_JOB, JobView

NONE = (np.iinfo(np.int32).max, np.iinfo(np.int32).min)  # the range of no values yet (a task's bounds)


def sgd_step(state, batch: dict, job: JobView):
    """One SGD step on one batch (state.py applies it); the task's loss and metrics are the job's sums over
    real samples."""
    task, valid = state.recipe.task, batch["valid"]

    def loss_sum(params):
        seen = view.training(state, params, valid, job)
        loss, metrics = loss_and_metrics(task, task.loss(seen, {name: batch[name] for name in task.outputs}))
        return loss, (seen.collections, metrics)

    (loss, (collections, metrics)), grads = jax.value_and_grad(loss_sum, has_aux=True)(state.params)
    count, loss, grads = job.sum(jnp.sum(valid)), job.sum(loss), jax.tree.map(job.sum, grads)
    metrics = {name: job.sum(value) for name, value in metrics.items()}
    # BatchNorm statistics (any mutable collection) averaged over every device: replicas stay identical.
    collections = jax.tree.map(job.mean, collections)
    skipped = jnp.zeros((), jnp.float32)
    if state.recipe.skip_nonfinite:  # --on-nan skip-step: the job-wide sums decide, alike on every device
        finite = jnp.isfinite(loss) & jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
        grads = jax.tree.map(lambda g: jnp.where(finite, g, 0), grads)
        # A step of no samples is no step (state.learn): no update, no statistics, no momentum
        loss, count, skipped = jnp.where(finite, loss, 0), jnp.where(finite, count, 0), 1 - finite.astype(jnp.float32)
    return state.learn(grads, count, collections), {"loss": loss, "count": count, "skipped": skipped, **metrics}


def loss_and_metrics(task, returned) -> tuple:
    """A task's loss as (its sum, {metric: sum}), checked while tracing: a scalar, and the metrics it names."""
    loss, metrics = returned if isinstance(returned, tuple) else (returned, {})
    if jnp.shape(loss) != ():
        raise UsageError(f"the task's loss returned shape {jnp.shape(loss)}; return its sum over the batch, a scalar")
    if set(metrics) != set(task.metrics) or any(jnp.shape(v) != () for v in metrics.values()):
        shapes = {name: jnp.shape(v) for name, v in metrics.items()}
        raise UsageError(
            f"the task's loss returned metrics {shapes}, but the task names {list(task.metrics)}; return each "
            "named metric as a scalar sum over the batch, and name every one in Task(metrics=...)"
        )
    return loss, {name: jnp.asarray(value, jnp.float32) for name, value in metrics.items()}


def sgd_steps(state, batch: dict, job: JobView):
    """Steps over a leading `steps` axis, fused by `lax.scan`: the host dispatches once per DALI batch.
    Returns the state and the sums of all of them (loss, samples, skipped steps, the task's metrics)."""
    if jax.tree.leaves(batch)[0].shape[0] == 1:  # XLA:CPU runs convolutions inside a scan ~15x slower
        return sgd_step(state, jax.tree.map(lambda x: x[0], batch), job)

    def one(carry, step_batch):
        state, sums = carry
        state, step = sgd_step(state, step_batch, job)
        return (state, jax.tree.map(jnp.add, sums, step)), None

    zero = {name: jnp.zeros((), jnp.float32) for name in ("loss", "count", "skipped", *state.recipe.task.metrics)}
    (state, sums), _ = jax.lax.scan(one, (state, zero), batch)
    return state, sums


def advance(tally, rows_per_reader: int, sums: dict, seen: dict) -> dict:
    """The epoch's running tally after a call: each reader's position in its shard, loss and sample sums, the
    steps --on-nan skip-step dropped, the task's metric sums and the bounds it tracks (`seen`)."""
    metrics = {name: tally["metrics"][name] + sums[name] for name in tally["metrics"]}
    return {
        "position": tally["position"] + rows_per_reader,
        "loss": tally["loss"] + sums["loss"],
        "count": tally["count"] + sums["count"],
        "skipped": tally["skipped"] + sums["skipped"],
        "metrics": metrics,
        "bounds": seen,
    }


def fold(task, seen: dict, batch: dict) -> dict:
    """`seen` ({name: [min, max]} so far) widened by one device's batch (rows, ...), inside the step: two
    reductions on the device, no collective, no sync (the host reads them where it waits anyway)."""
    if task.bounds is None:
        return seen
    values, out = task.bounds.values(batch), {}
    for name, now in seen.items():
        ids = values.get(name)
        if ids is None:
            out[name] = now
            continue
        ids = jnp.asarray(ids).astype(jnp.int32)
        out[name] = jnp.stack([jnp.minimum(now[0], ids.min()), jnp.maximum(now[1], ids.max())])
    return out


def sample_order(x, readers: int):
    """A device's rows in sample order: its readers' rows taken in turn (reader r's i-th row is the
    device's sample i*R + r), so the samples of SGD step j do not depend on --steps-per-call (a call
    holds each reader's rows end to end; DALI reads that way)."""
    if readers == 1:
        return x
    return x.reshape(readers, -1, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)


def pmap_call(state, tally, batch: dict, batch_size: int, readers: int):
    """One device's view of a call (pmap): each output (rows, ...), valid (rows,): 1 for real samples, 0 for padding."""
    rows = batch["valid"].shape[0] // readers
    steps = lambda x: sample_order(x, readers).reshape(-1, batch_size, *x.shape[1:])
    state, sums = sgd_steps(state, jax.tree.map(steps, batch), PMAP_JOB)
    return state, advance(tally, rows, sums, fold(state.recipe.task, tally["bounds"], batch))


def sharded_call(state, tally, batch: dict, batch_size: int, readers: int, rows_at=None):
    """The whole job's view of a call (jit): each output (devices, rows, ...), valid (devices, rows). `rows_at`:
    where a step's rows lie (a mesh with a tensor axis: each tensor group's rows on each of its devices)."""
    devices, rows = batch["valid"].shape[0], batch["valid"].shape[1] // readers

    def steps(x):  # (devices, k*B, ...) -> (k, devices*B, ...): step j takes samples j*B.. of every device
        x = jax.vmap(partial(sample_order, readers=readers))(x)
        per_step = x.reshape(x.shape[0], -1, batch_size, *x.shape[2:]).swapaxes(0, 1)
        per_step = per_step.reshape(per_step.shape[0], -1, *x.shape[2:])
        return per_step if rows_at is None else jax.lax.with_sharding_constraint(per_step, rows_at)

    job = replace(JIT_JOB, devices=devices)  # each device's rows mix among themselves
    state, sums = sgd_steps(state, jax.tree.map(steps, batch), job)
    seen = jax.vmap(partial(fold, state.recipe.task))(tally["bounds"], batch)  # per device, as the tally
    return state, advance(tally, rows, sums, seen)


def call_tally(tally: dict, task) -> dict:
    """What device calls carry: an epoch's `tally` as a checkpoint holds it (checkpoint.zero_tally at the
    epoch's start: the task's metric sums with it), the steps --on-nan skip-step dropped since the task started
    the epoch and the bounds the task tracks, which are checked before every checkpoint (neither is kept in
    one). Metric sums the tally lacks (an earlier version's checkpoint kept none) start at zero here."""
    kept = tally["metrics"] if metrics_kept(tally.get("metrics"), task) else {}  # other names' are no part of these
    metrics = {name: kept.get(name, np.zeros((), np.float32)) for name in task.metrics}
    bounds = {name: np.array(NONE, np.int32) for name in bounded(task)}
    return {**tally, "skipped": np.zeros((), np.float32), "metrics": metrics, "bounds": bounds}


def bounded(task) -> tuple[str, ...]:
    """The names of what `task` bounds (tasks/contract.py's Bounds), whose ranges a tally carries."""
    return task.bounds.names if task.bounds is not None else ()


def metrics_kept(names, task) -> bool:
    """Whether metric sums of `names` (a tally's, a checkpoint's; None: it kept none) are the task's, each one."""
    return names is not None and set(names) == set(task.metrics)
