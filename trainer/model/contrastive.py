"""`--model simclr-cnn` (the contrastive task's own): a small conv encoder, SimCLR's projection head and a
linear probe, for --image-size square RGB crops.

It returns a dict (tasks/contrastive.py takes it): `features`, the encoder's pooled output (what a
downstream task would use), `projection`, those features through the projection MLP (what the contrastive
loss compares), and `probe`, a linear layer on the features with their gradient stopped: the online linear
probe learns to read the classes from the features without moving the encoder. GroupNorm, not BatchNorm:
a sample's features do not depend on the rest of its device's batch, so the loss is the same whichever
devices the batch is split over, and no statistic needs keeping in step across them.
"""

from __future__ import annotations

import flax.linen as nn
import jax

from dali_launch.trainer.model.models import max_pool_2x2


class SimCLR(nn.Module):
    """Three 3x3 convs (32, 64, 128 filters; the first two pooled 2x2), global average pooling, a 128-128-64
    projection MLP: ~10 M multiply-adds per 32x32 view, small enough for two CPU cores."""

    num_classes: int = 10
    widths: tuple[int, ...] = (32, 64, 128)
    projection: tuple[int, ...] = (128, 64)

    @nn.compact
    def __call__(self, x):
        for i, width in enumerate(self.widths):
            x = nn.relu(nn.GroupNorm(num_groups=8)(nn.Conv(width, (3, 3), use_bias=False)(x)))
            x = x if i == len(self.widths) - 1 else max_pool_2x2(x)
        features = x.mean(axis=(1, 2))
        z = nn.relu(nn.Dense(self.projection[0])(features))
        z = nn.Dense(self.projection[1])(z)
        probe = nn.Dense(self.num_classes, name="probe")(jax.lax.stop_gradient(features))
        return {"features": features, "projection": z, "probe": probe}
