"""What a task's loss and evaluation see of the step (tasks/contract.py): the model, the batch's mask of real
samples, the job's rows, and the keys of this step's devices. The step and the evaluation make one per batch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp

from dali_launch.trainer.data.rows import AXIS


@dataclass(frozen=True)
class JobView:
    """How a program sees the job: `sum` over every device (psum under pmap; nothing under jit, whose arrays
    are already job-wide), `index`, this device's global index (0 under jit: one program sees every row),
    `gather`, a device's rows of every device (all_gather under pmap; nothing under jit); `devices`: the devices'
    batches its rows hold (jit: the job's, end to end)."""

    sum: Callable
    index: Callable
    gather: Callable = lambda x: x
    devices: int = 1

    def mean(self, x):
        return self.sum(x) / self.sum(jnp.ones((), x.dtype))


def _own_rows_first(x):
    """Every device's rows of `x`, this device's first (the contract's order): all_gather alone lays them out
    in device order, where a loss indexing its own rows from 0 would pair each device's anchors with device
    0's rows."""
    rows = jax.lax.all_gather(x, AXIS, tiled=True)
    return jnp.roll(rows, -jax.lax.axis_index(AXIS) * x.shape[0], axis=0)


PMAP_JOB = JobView(partial(jax.lax.psum, axis_name=AXIS), partial(jax.lax.axis_index, AXIS), _own_rows_first)
JIT_JOB = JobView(lambda x: x, lambda: 0)


@dataclass
class StepView:
    """One batch's view (tasks/contract.py says what a task may use). Training, `model` applies the parameters
    being differentiated with dropout and mutable collections (BatchNorm statistics) that move: the last call's
    are the step's (`collections`)."""

    apply: Callable  # (x, call index) -> (outputs, collections)
    valid: jax.Array
    job: JobView
    key_of: Callable | None = None  # device index -> this step's key of that device (None: evaluating)
    collections: dict = field(default_factory=dict)
    calls: int = 0

    def model(self, x):
        outputs, self.collections = self.apply(x, self.calls)
        self.calls += 1
        return outputs

    @property
    def key(self):
        return self.key_of(self.job.index())

    def gather(self, x):
        return self.job.gather(x)

    def per_device(self, fn: Callable, *xs, stream: int = 0):
        """`fn(key, *rows)` on each device's own rows of `xs`, its key this step's of that device folded with
        `stream`: the same under pmap (one device's rows) and jit (the job's, split back into the devices')."""
        key = lambda device: jax.random.fold_in(self.key_of(device), stream)
        if self.job.devices == 1:
            return fn(key(self.job.index()), *xs)
        keys = jax.vmap(key)(jnp.arange(self.job.devices))
        split = lambda x: x.reshape(self.job.devices, -1, *x.shape[1:])
        out = jax.vmap(fn)(keys, *map(split, xs))
        return jax.tree.map(lambda y: y.reshape(-1, *y.shape[2:]), out)


def training(state, params, valid, job: JobView) -> StepView:
    """The view of a training step: the model with `params` (what is differentiated), dropout keyed by the step
    and device (a second call of the model in one step folds in its index), its statistics moving."""
    key = state.dropout_key(job.index())

    def apply(x, call: int):
        variables = {"params": params, **state.collections}
        return state.forward(variables, x, True, key if call == 0 else jax.random.fold_in(key, call))

    return StepView(apply, valid, job, key_of=state.dropout_key, collections=state.collections)


def evaluating(forward, variables, valid, job: JobView = JIT_JOB) -> StepView:
    """The view of an evaluation batch: the model applied to `variables` (BatchNorm: its running statistics)."""
    return StepView(lambda x, _: (forward(variables, x, False)[0], {}), valid, job)
