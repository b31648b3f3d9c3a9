"""ResNet v1.5 with BatchNorm, the standard ImageNet model (`--model resnet50`), after Flax's
examples/imagenet/models.py: bottleneck blocks whose 3x3 convolution strides (v1.5), BatchNorm
statistics kept in `batch_stats`, and each block's last BatchNorm scale initialised to zero, so
every block starts as the identity (Goyal et al. 2017). Under --parallel pmap each device
normalises by its own batch and the trainer averages the statistics over the job every step;
under --parallel sharded the step's batch is one job-wide array and BatchNorm normalises over it.
On more than one device --parallel auto takes pmap: sharded's per-layer all-reduces cost 7 % (README).
"""

from __future__ import annotations

from functools import partial

import flax.linen as nn
import jax.numpy as jnp

from dali_launch.trainer.model.models import as_images
from dali_launch.trainer.model.pooling import stem_pool


def batch_norm(train: bool, float32_stats: bool):
    """BatchNorm as every layer here has it; `float32_stats` False: statistics in the input's dtype (bf16)."""
    return partial(
        nn.BatchNorm,
        use_running_average=not train,
        momentum=0.9,
        epsilon=1e-5,
        force_float32_reductions=float32_stats,
    )


class Bottleneck(nn.Module):
    filters: int
    strides: int = 1
    float32_stats: bool = True

    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = batch_norm(train, self.float32_stats)
        conv = partial(nn.Conv, use_bias=False)
        y = nn.relu(norm()(conv(self.filters, (1, 1))(x)))
        y = nn.relu(norm()(conv(self.filters, (3, 3), self.strides)(y)))  # v1.5: the stride is here
        y = norm(scale_init=nn.initializers.zeros)(conv(self.filters * 4, (1, 1))(y))
        if x.shape != y.shape:
            x = norm()(conv(self.filters * 4, (1, 1), self.strides)(x))
        return nn.relu(x + y)


class ResNet(nn.Module):
    """Bottleneck stages of `width`·2^stage filters. Images under 64 pixels get a 3x3 stem without
    pooling (as models.ResNet18): a 7x7/2 stem and a pool would leave 7x7 of 28x28."""

    num_classes: int = 1000
    stages: tuple[int, ...] = (3, 4, 6, 3)
    width: int = 64
    float32_stats: bool = True  # --batchnorm-stats (resnet50's factory sets it)
    pool_grad: str = "scatter"  # --pool-grad resolved (model/pooling.py)

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = as_images(x)
        x = x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)  # bf16 stays bf16
        small = x.shape[1] < 64
        x = nn.Conv(self.width, (3, 3) if small else (7, 7), 1 if small else 2, use_bias=False)(x)
        x = nn.relu(batch_norm(train, self.float32_stats)()(x))
        if not small:
            x = stem_pool(x, self.pool_grad)
        for stage, blocks in enumerate(self.stages):
            for block in range(blocks):
                x = Bottleneck(self.width * 2**stage, 2 if stage and not block else 1, self.float32_stats)(x, train)
        return nn.Dense(self.num_classes)(jnp.mean(x, axis=(1, 2)))


def resnet50(num_classes: int, batchnorm_stats: str = "float32", pool_grad: str = "scatter") -> ResNet:
    """`batchnorm_stats` (--batchnorm-stats resolved: float32 or compute) sets the statistics' precision,
    `pool_grad` (--pool-grad resolved) the stem pool's gradient."""
    return ResNet(num_classes=num_classes, float32_stats=batchnorm_stats != "compute", pool_grad=pool_grad)
