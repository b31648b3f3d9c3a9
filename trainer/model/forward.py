"""How the trainer calls a model (the contract is in models.py): training or not, its mutable
collections, its dropout RNG, and the compute precision.

Old models (`__call__(self, x)`, params only) are called exactly as before; a model whose
`__call__` takes `train` (or `training`) is told which, and so is an NNX model's adapter
(nnx_model.py); collections other than `params` (BatchNorm's `batch_stats`) are mutable while
training; the `dropout` RNG stream is always given.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp

TRAIN_KWARGS = ("train", "training")
DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}


def train_kwarg(module: nn.Module) -> str | None:
    """The name of the module's `train`/`training` parameter, if its `__call__` has one. An NNX model's
    adapter says so itself (nnx_model.py: NNX, 0.1 s of imports, is loaded only for models of it)."""
    if fixed := getattr(module, "TRAIN_KWARG", None):
        return fixed
    try:
        parameters = inspect.signature(type(module).__call__).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in TRAIN_KWARGS if name in parameters), None)


def split(variables: dict) -> tuple[dict, dict]:
    """params, and every other collection (batch_stats, ...)."""
    return variables["params"], {k: v for k, v in variables.items() if k != "params"}


@dataclass(frozen=True)
class Forward:
    """`forward(variables, images, train, rng)` -> the model's outputs (floating ones in float32: logits, or any
    pytree a task's loss takes) and the updated mutable collections.

    bf16: parameters and floating images are cast to bfloat16 at the call, so any model computes
    in bf16 while the float32 parameters stay the ones differentiated and updated.
    """

    module: nn.Module
    precision: str = "fp32"

    def __call__(self, variables: dict, images, train: bool, rng=None) -> tuple[jax.Array, dict]:
        params, collections = split(variables)
        kwargs = {name: train for name in [train_kwarg(self.module)] if name}
        if self.precision != "fp32":
            dtype = DTYPES[self.precision]
            params = jax.tree.map(lambda p: p.astype(dtype) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)
            images = images.astype(dtype) if jnp.issubdtype(images.dtype, jnp.floating) else images
        rngs = {"dropout": rng} if rng is not None else None
        if train and collections:
            logits, updates = self.module.apply(
                {"params": params, **collections}, images, rngs=rngs, mutable=list(collections), **kwargs
            )
            updates = jax.tree.map(lambda new, old: new.astype(old.dtype), dict(updates), collections)
        else:
            logits, updates = self.module.apply({"params": params, **collections}, images, rngs=rngs, **kwargs), {}
        return jax.tree.map(_float32, logits), updates


def _float32(x):
    """An output as the loss takes it: floating outputs in float32 (a bf16 model's logits), others as they are."""
    return x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x
