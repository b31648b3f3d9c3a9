"""`--model centernet`: a small anchor-free detector in the manner of CenterNet (Zhou et al., "Objects as
Points", 2019), for --task detection (tasks/detection.py says what it is trained on and how it is read).

A conv backbone of GroupNorm'd 3x3 convolutions brings the image to a quarter of its side (stride 4: a 64-pixel
image gives a 16x16 grid); one shared 3x3 layer (GroupNorm'd too: SGD's steps stay bounded) then feeds three
1x1 heads, returned as a dict:

    heatmap  (batch, H/4, W/4, num_classes)  logits of an object's centre falling in the cell, per class
    size     (batch, H/4, W/4, 2)            the width and height of that object, in cells
    offset   (batch, H/4, W/4, 2)            where in its cell the centre lies (0..1, x then y)

The heatmap's bias starts at the logit of 0.1, as the paper's: most cells hold no centre, and the focal loss
starts small. ~21 M multiply-adds per 64x64 image: a few seconds an epoch of hundreds of images on two cores.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax.numpy as jnp

from dali_launch.trainer.model.models import as_images

HEADS = {"heatmap": None, "size": 2, "offset": 2}  # the task's heads and their widths (None: num_classes)
PRIOR = 0.1  # the heatmap's initial probability of a centre in a cell


def _conv(x, width: int, strides: int = 1):
    """3x3 conv, GroupNorm (no batch statistics to keep in step across devices), ReLU."""
    x = nn.Conv(width, (3, 3), strides, use_bias=False)(x)
    return nn.relu(nn.GroupNorm(num_groups=math.gcd(8, width))(x))


class CenterNet(nn.Module):
    num_classes: int = 10
    widths: tuple[int, ...] = (16, 32, 48)  # the backbone's at strides 2, 4 and 4
    head: int = 48

    @nn.compact
    def __call__(self, x):
        x = as_images(x).astype(jnp.float32)
        x = _conv(_conv(x, self.widths[0], 2), self.widths[0])
        x = _conv(_conv(x, self.widths[1], 2), self.widths[1])
        x = _conv(_conv(x, self.widths[2]), self.widths[2])
        x = _conv(x, self.head)
        prior = nn.initializers.constant(-math.log((1 - PRIOR) / PRIOR))
        bias = lambda name: prior if name == "heatmap" else nn.initializers.zeros
        return {
            name: nn.Conv(width or self.num_classes, (1, 1), bias_init=bias(name), name=name)(x)
            for name, width in HEADS.items()
        }
