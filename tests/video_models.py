"""Models of clips for the tests, found through PYTHONPATH=tests: an MLP that compiles in a second (where a test is
about the data path, not the model: st-cnn's convolutions compile for ~10 s on two cores), its first kernel large
enough that --mesh's fsdp axis splits it (arrays of trainer/step/mesh.py's FSDP_MIN_ELEMENTS or more)."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

HIDDEN = 16  # the first kernel: (T × 8 × 8 × 3, 16), 24,576 elements for 8 frames


class ClipMLP(nn.Module):
    """Each frame pooled to 8×8, the clip's frames in order into one hidden layer, then the head."""

    num_classes: int

    @nn.compact
    def __call__(self, clips):
        b, t, h, w, c = clips.shape
        x = clips.astype(jnp.float32).reshape(b * t, h, w, c)
        x = nn.avg_pool(x, (h // 8, w // 8), strides=(h // 8, w // 8)).reshape(b, -1)
        return nn.Dense(self.num_classes)(nn.relu(nn.Dense(HIDDEN)(x)))


def clip_mlp(num_classes: int) -> ClipMLP:
    return ClipMLP(num_classes=num_classes)
