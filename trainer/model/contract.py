"""The `--model` contract (models.py's docstring states it), checked: what a factory returns, and the
logits it gives. Every factory is called abstractly (jax.eval_shape): nothing is computed and no
device taken, so the launcher checks a user's factory before anything is written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import flax.linen as nn
import jax

from dali_launch.trainer.errors import UsageError

# How an NNX model reaches the trainer: "split" (nnx_model.py: split once, merged at trace time) or
# "bridge" (nnx_bridge.py: Flax's ToLinen). benchmarks/nnx_step.py times both against the Linen CNN.
ADAPTER = "split"


def make(
    name: str,
    factory: Callable,
    num_classes: int,
    takes_rngs: bool,
    adapter: str = ADAPTER,
    options: dict | None = None,
):
    """The module `factory` makes: a flax.linen.Module, or for an nnx.Module its adapter;
    `takes_rngs`: the factory names an `rngs` parameter (registry.takes_rngs); `options`: the
    model flags a Linen factory names (registry.model_options)."""
    if takes_rngs:  # Flax's NNX, imported for models of it alone (0.1 s of every other process's start)
        from dali_launch.trainer.model import nnx_model

        model = nnx_model.build(name, factory, num_classes)
        if isinstance(model, nnx_model.NnxModel):
            if adapter == "bridge":
                from dali_launch.trainer.model.nnx_bridge import Bridged

                return Bridged(factory, num_classes)
            return model
    else:
        model = _linen(name, factory, num_classes, options or {})
    nnx = sys.modules.get("flax.nnx")  # an nnx.Module was made with NNX imported
    if nnx is not None and isinstance(model, nnx.Module):
        from dali_launch.trainer.model.nnx_model import CALL

        raise UsageError(
            f"--model {name} returned a flax.nnx.Module but takes no rngs; give it an `rngs` parameter and "
            f"build the module with it: the trainer calls {CALL}"
        )
    if not isinstance(model, nn.Module):
        raise UsageError(
            f"--model {name} returned a {type(model).__name__}, neither a flax.linen.Module nor a "
            f"flax.nnx.Module; the factory must return the module itself"
        )
    return model


def _linen(name: str, factory: Callable, num_classes: int, options: dict):
    """factory(num_classes=N), evaluated abstractly: a Linen module is a dataclass and computes nothing;
    an NNX module built without rngs must not compute its parameters here either."""
    found = []
    try:
        jax.eval_shape(lambda: found.append(factory(num_classes=num_classes, **options)))
    except Exception as e:
        raise UsageError(
            f"--model {name}: factory(num_classes={num_classes}) raised {type(e).__name__}: {e}; fix the factory"
        ) from None
    return found[0]


def width_error(name: str, shape: tuple, num_classes: int) -> UsageError:
    return UsageError(
        f"--model {name} returns logits of shape {shape} for one sample but "
        f"--num-classes is {num_classes}; make it return (batch, {num_classes}) "
        f"(its last layer num_classes wide)"
    )
