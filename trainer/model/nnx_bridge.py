"""The other way to train an NNX model here: Flax's own bridge (`flax.nnx.bridge.ToLinen`), which makes
it a Linen module; kept beside nnx_model.py so that benchmarks/nnx_step.py times both in one run.

ToLinen builds the NNX module afresh inside every call and loads it from the Linen variables (the
parameter initialisers it runs are dead code XLA drops), where nnx_model.py merges a graph split
once. Its Dropout streams come from Linen's `dropout` RNG, so the trainer's keys reach it as they
reach a Linen model. The trainer uses nnx_model.py (contract.ADAPTER); this one is selected by
the benchmark only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import flax.linen as nn
from flax.nnx import bridge


@dataclass(frozen=True)
class InMode:
    """What ToLinen calls to build the module: the factory, then NNX's own train() or eval()."""

    factory: Callable
    num_classes: int
    train: bool

    def __call__(self, rngs):
        module = self.factory(num_classes=self.num_classes, rngs=rngs)
        module.train() if self.train else module.eval()
        return module


class Bridged(nn.Module):
    """An NNX factory's module as a Linen module whose `__call__` takes `train`, as forward.py calls it."""

    factory: Callable
    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool):
        # metadata_fn=None: plain arrays in the Linen variables, as a Linen model's (no NNXMeta boxes)
        return bridge.ToLinen(InMode(self.factory, self.num_classes, train), metadata_fn=None, name="nnx")(x)
