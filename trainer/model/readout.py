"""A classifier's head that the default optimizer's steps do not overshoot: logits of features of unit length.

A Dense head on pooled features f of width d moves a logit by about lr × |f|² a step: with d = 64-128 features of
order one that is ~d × the learning rate, and SGD at 0.1 with momentum 0.9 (a run's default) overshot from its
first steps (audio-cnn's loss went from 1.9 to 6.1 at its first; st-cnn's test accuracy swung between 1.0 and 0.67
from one epoch to the next). Normalised (LayerNorm) and divided by √d, the features have unit length, and a step moves
a logit by ~the learning rate whatever the width (as µP's readout multiplier does for wide models). AdamW, whose
steps do not scale with the gradient, trains it as it trained a plain Dense head.
"""

from __future__ import annotations

import math

import flax.linen as nn


class Readout(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, features):
        unit = nn.LayerNorm()(features) * (1 / math.sqrt(features.shape[-1]))
        return nn.Dense(self.num_classes)(unit)
