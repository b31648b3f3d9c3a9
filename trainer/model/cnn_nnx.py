"""`--model cnn-nnx`: the built-in CNN (models.py) written in Flax NNX, layer for layer: the same
convolutions, pools, widths and default initialisers, so the two train the same way and
benchmarks/nnx_step.py can hold their step times side by side.

NNX layers are told their input widths when built (nnx.Linear(in, out)), where Linen infers them at
initialisation: the twin is for 28x28 grey images (MNIST, Fashion-MNIST: the example's flat 784
vector or NHWC); `image_size` and `channels` build it for others.
"""

from __future__ import annotations

import itertools

from flax import nnx

from dali_launch.trainer.model.models import as_images, max_pool_2x2


class CNN(nnx.Module):
    """3x3 convs of 32 and 64 filters, each with a 2x2 max pool, then 128 and num_classes units."""

    def __init__(
        self,
        num_classes: int = 10,
        *,
        rngs: nnx.Rngs,
        image_size: int = 28,
        channels: int = 1,
        features: tuple[int, ...] = (32, 64),
        hidden: int = 128,
    ):
        widths = (channels, *features)
        self.convs = nnx.List([nnx.Conv(a, b, (3, 3), rngs=rngs) for a, b in itertools.pairwise(widths)])
        side = image_size
        for _ in features:
            side //= 2  # each pool halves the side (an odd last row or column dropped)
        self.hidden = nnx.Linear(side * side * features[-1], hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, num_classes, rngs=rngs)

    def __call__(self, x):
        x = as_images(x)
        for conv in self.convs:
            x = max_pool_2x2(nnx.relu(conv(x)))
        x = nnx.relu(self.hidden(x.reshape(x.shape[0], -1)))
        return self.out(x)
