"""`--model unet`: a small U-Net (Ronneberger et al. 2015) for `--task segmentation`: per-pixel logits.

An encoder of 3x3 conv blocks, each level half the last's side and twice its width, then a decoder that
upsamples (nearest neighbour, to the skip's exact side: any image size works, odd ones too) and joins each
level's skip connection. GroupNorm, as models.py's ResNet-18: nothing to keep in step across devices. It
returns logits (batch, height, width, num_classes) at the input's resolution. Its widths (16, 32, 64) train
on two CPU cores in seconds on 32-pixel crops; real images want more and wider levels: `--model
mypkg.models:wide` with `def wide(num_classes): return UNet(num_classes, widths=(32, 64, 128, 256))`.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from dali_launch.trainer.model.models import max_pool_2x2


def _block(x, width: int):
    """Two 3x3 convolutions, each normalised and rectified."""
    for _ in range(2):
        x = nn.Conv(width, (3, 3), use_bias=False)(x)
        x = nn.relu(nn.GroupNorm(num_groups=math.gcd(8, width))(x))
    return x


class UNet(nn.Module):
    num_classes: int = 2
    widths: tuple[int, ...] = (16, 32, 64)

    @nn.compact
    def __call__(self, x):
        skips = []
        for width in self.widths[:-1]:
            x = _block(x, width)
            skips.append(x)
            x = max_pool_2x2(x) if min(x.shape[1:3]) > 1 else x
        x = _block(x, self.widths[-1])
        for width, skip in zip(reversed(self.widths[:-1]), reversed(skips)):
            x = jax.image.resize(x, (*skip.shape[:3], x.shape[-1]), "nearest")
            x = _block(jnp.concatenate([nn.Conv(width, (1, 1))(x), skip], axis=-1), width)
        return nn.Conv(self.num_classes, (1, 1))(x)
