"""`--model audio-cnn`: a small CNN for log-mel spectrograms (--pipeline audio's (mel bins, frames, channels)).

Three blocks of a 3×3 convolution and a max pool (frequency halved by each, time by the first two) make features
of local time-frequency shapes; their mean over frequency leaves one vector per 40 ms, and a convolution over
CONTEXT of those (360 ms) sees how events follow each other in time; the maximum over time then finds that
pattern wherever the clip has it. So the class may lie in a rhythm, not only in which frequencies sound: a model
of frames alone (their mean) cannot tell classes apart that differ only in the order of the same sounds (`data
synth --format audio`'s). ~17 M multiply-adds for the defaults' 64 × 100 spectrogram: it trains on two CPU cores.

It trains with the run's default optimizer (SGD at 0.1, momentum 0.9) as well as with AdamW: its convolutions are
GroupNorm'd (no batch statistics to keep in step across devices) and its head is readout.py's. With neither, SGD's
first steps drove the second block's ReLUs negative (10 % of them alive after one epoch, 1 % after eight) and the
model stayed at chance; with the head alone it learned, two epochs later than with both.
"""

from __future__ import annotations

import math

import flax.linen as nn

from dali_launch.trainer.model.models import as_images
from dali_launch.trainer.model.readout import Readout

CONTEXT = 9  # time steps (40 ms each, after two halvings of 10 ms frames) the temporal convolution sees


class AudioCNN(nn.Module):
    num_classes: int = 10
    features: tuple[int, ...] = (16, 32, 64)
    hidden: int = 128

    @nn.compact
    def __call__(self, x):
        x = as_images(x)
        for block, width in enumerate(self.features):
            # pooled, then normalised: a quarter of the elements to normalise (XLA:CPU is slow at GroupNorm)
            x = _normed(_max_pool(nn.Conv(width, (3, 3), use_bias=False)(x), 2, 2 if block < 2 else 1))
        x = x.mean(axis=1)  # over frequency: (batch, time, features)
        x = _normed(nn.Conv(self.hidden, (CONTEXT,), use_bias=False)(x)).max(axis=1)
        return Readout(self.num_classes)(x)


def _normed(x):
    """GroupNorm (groups of the channels, per sample), then ReLU."""
    return nn.relu(nn.GroupNorm(num_groups=math.gcd(8, x.shape[-1]))(x))


def _max_pool(x, over_h: int, over_w: int):
    """nn.max_pool by (over_h, over_w) with as strides, as a reshape (models.max_pool_2x2's: its gradient is cheaper
    on XLA:CPU); a side of 1 is kept, a ragged last row or column dropped as VALID does."""
    n, h, w, c = x.shape
    over_h, over_w = min(over_h, h), min(over_w, w)
    x = x[:, : h - h % over_h, : w - w % over_w]
    return x.reshape(n, h // over_h, over_h, w // over_w, over_w, c).max(axis=(2, 4))
