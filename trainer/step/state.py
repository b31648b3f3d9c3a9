"""The train state: everything a step changes and a checkpoint keeps, and how one update is applied.

Beside the parameters and optax's state it holds the model's mutable collections (BatchNorm's
`batch_stats`), the EMA of the parameters (--ema-decay), the gradient accumulator
(--accumulate-steps), the dropout key and `slot`, the count of SGD steps passed. `slot` counts
padding-only steps too, so that the schedule, the dropout keys and the accumulation groups follow
the data (an epoch is always DeviceBatches.steps × --steps-per-call slots) and a resumed run
continues them exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from dali_launch.trainer.model.forward import Forward
from dali_launch.trainer.tasks.contract import Task


@dataclass(frozen=True)
class Recipe:
    """What a step does besides the optimizer; static (part of the compiled program)."""

    task: Task  # its loss, metrics and evaluation (tasks/contract.py): the run's, never a default
    accumulate_steps: int = 1
    ema_decay: float = 0.0
    skip_nonfinite: bool = False  # --on-nan skip-step: a step whose loss or gradients are not finite is dropped


class TrainState(struct.PyTreeNode):
    step: jax.Array  # optimizer updates applied
    slot: jax.Array  # SGD steps passed, padding-only ones included
    params: Any
    collections: dict  # mutable collections (batch_stats, ...); {} for stateless models
    opt_state: Any
    ema: dict  # {"params": ..., **collections} averaged, or {} without --ema-decay
    accum: dict  # {"grads", "count"} summed over the current group, or {} without --accumulate-steps
    rng: jax.Array  # the dropout key (raw uint32 key data); each step folds in its slot and device
    forward: Forward = struct.field(pytree_node=False)
    tx: optax.GradientTransformation = struct.field(pytree_node=False)
    schedule: Callable = struct.field(pytree_node=False)
    recipe: Recipe = struct.field(pytree_node=False)

    @classmethod
    def create(cls, variables: dict, rng, forward: Forward, tx, schedule, recipe: Recipe) -> TrainState:
        params = variables["params"]
        collections = {k: v for k, v in variables.items() if k != "params"}
        ema = {"params": params, **collections} if recipe.ema_decay else {}
        accum = (
            {"grads": jax.tree.map(jnp.zeros_like, params), "count": jnp.zeros((), jnp.float32)}
            if recipe.accumulate_steps > 1
            else {}
        )
        return cls(
            step=jnp.zeros((), jnp.int32),
            slot=jnp.zeros((), jnp.int32),
            params=params,
            collections=collections,
            opt_state=tx.init(params),
            ema=ema,
            accum=accum,
            rng=rng,
            forward=forward,
            tx=tx,
            schedule=schedule,
            recipe=recipe,
        )

    def variables(self, ema: bool = False) -> dict:
        """What the model is applied to: the trained variables, or their EMA."""
        return self.ema if ema else {"params": self.params, **self.collections}

    def dropout_key(self, device_index):
        """Differs per step and device, and is the same again in a resumed run."""
        return jax.random.fold_in(jax.random.fold_in(self.rng, self.slot), device_index)

    def learn(self, grad_sums, count, collections: dict) -> TrainState:
        """One SGD step: `grad_sums` and `count` are the job's sums over the step's real samples,
        `collections` the model's updated (and already averaged) mutable collections."""
        k = self.recipe.accumulate_steps
        due, step_count = (self.slot + 1) % k == 0, count
        if k > 1:
            grad_sums = jax.tree.map(jnp.add, self.accum["grads"], grad_sums)
            count = self.accum["count"] + count
        # One mean over every real sample of the group: exactly one step of a k times larger batch.
        grads = jax.tree.map(lambda g: g / jnp.maximum(count, 1), grad_sums)
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        lr = self.schedule(self.slot // k)
        params = optax.apply_updates(self.params, jax.tree.map(lambda u: lr * u, updates))
        stepped = self.replace(
            step=self.step + 1,
            params=params,
            opt_state=opt_state,
            ema=self._averaged(params, collections or self.collections),
        )
        # A step made only of padding (the tail of a shard read k batches at a time) is no step at
        # all: momentum must not move on a zero gradient, nor statistics on padding.
        applied = jnp.logical_and(due, count > 0)
        new = jax.tree.map(lambda a, b: jnp.where(applied, a, b), stepped, self)
        if collections:
            new = new.replace(
                collections=jax.tree.map(lambda a, b: jnp.where(step_count > 0, a, b), collections, self.collections)
            )
        if k > 1:
            group = {"grads": grad_sums, "count": count}
            new = new.replace(accum=jax.tree.map(lambda s: jnp.where(due, jnp.zeros_like(s), s), group))
        return new.replace(slot=self.slot + 1)

    def _averaged(self, params, collections: dict) -> dict:
        if not self.ema:
            return self.ema
        d = self.recipe.ema_decay
        return jax.tree.map(lambda e, v: d * e + (1 - d) * v, self.ema, {"params": params, **collections})
