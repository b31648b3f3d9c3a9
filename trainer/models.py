"""Models by name. `mlp` is the DALI + Flax example's network, layer for layer."""
from __future__ import annotations

import flax.linen as nn

from dali_launch.trainer.errors import UsageError


class MLP(nn.Module):
    """784-784-1024-1024-10 with ReLUs, as in DALI's "Training neural network with DALI and Flax"."""
    features: tuple[int, ...] = (784, 1024, 1024)
    num_classes: int = 10

    @nn.compact
    def __call__(self, x):
        for width in self.features:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_classes)(x)


MODELS = {"mlp": MLP}


def create_model(name: str) -> nn.Module:
    if name not in MODELS:
        raise UsageError(f"unknown --model {name!r}; choose one of: {', '.join(MODELS)}")
    return MODELS[name]()
