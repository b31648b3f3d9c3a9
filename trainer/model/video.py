"""Models of clips (`--task video`): a batch (B, T, H, W, C) of T frames each, logits (B, num_classes).

    st-cnn       factorised space-time: a small 2D CNN on every frame (the same weights), its features pooled
                 over the frame, then two 1D convolutions along time: what changes from frame to frame, and in
                 which order, reaches the head (R(2+1)D's factorisation, kept small)
    frame-mean   the baseline that sees no time: the same per-frame CNN, its features averaged over the frames
                 into the head (a bag of frames: the frames' order is lost)
    vivit-ti16   a tubelet ViT (ViViT's tubelet embedding): 2×16×16 tubelets embedded by one 3D convolution,
                 a learned position embedding, then the project's ViT encoder (vit.py, Ti's size) and its head

Frames are normalised floats (the pipeline's); bf16 stays bf16. st-cnn and frame-mean read their logits through
readout.py's head, so the run's default SGD (0.1, momentum 0.9) trains them; GroupNorm in the frame CNN did not
help (it slowed st-cnn: the synthetic clips' frames are flat colours, which a norm over few channels blurs).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model import vit
from dali_launch.trainer.model.readout import Readout

TUBELET = (2, vit.PATCH, vit.PATCH)  # frames, height, width of one token


class FrameFeatures(nn.Module):
    """Each frame's features: two 3×3 convolutions, ReLU, a 2×2 average pool between them, pooled over the frame."""

    widths: tuple[int, int] = (16, 32)

    @nn.compact
    def __call__(self, clips):
        b, t = clips.shape[:2]
        x = clips.reshape(b * t, *clips.shape[2:])
        x = nn.relu(nn.Conv(self.widths[0], (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.relu(nn.Conv(self.widths[1], (3, 3))(x))
        return jnp.mean(x, axis=(1, 2)).reshape(b, t, -1)


class SpaceTimeCNN(nn.Module):
    """Per-frame 2D features, then 1D convolutions along time, averaged over time into the head."""

    num_classes: int = 10
    width: int = 64

    @nn.compact
    def __call__(self, clips):
        x = FrameFeatures()(_floats(clips))
        for _ in range(2):
            x = nn.relu(nn.Conv(self.width, (3,))(x))  # (B, T, width): along time
        return Readout(self.num_classes)(jnp.mean(x, axis=1))


class FrameMean(nn.Module):
    """The per-frame CNN's features averaged over the frames: no model of time."""

    num_classes: int = 10
    width: int = 64

    @nn.compact
    def __call__(self, clips):
        x = nn.relu(nn.Dense(self.width)(FrameFeatures()(_floats(clips))))
        return Readout(self.num_classes)(jnp.mean(x, axis=1))


class TubeletViT(nn.Module):
    """ViViT's tubelet embedding in front of the project's ViT encoder."""

    num_classes: int = 10
    width: int = 192
    depth: int = 12
    mlp_dim: int = 768
    num_heads: int = 3
    drop_path: float = 0.0
    attention: str = "xla"
    remat: bool = False

    @nn.compact
    def __call__(self, clips, train: bool = False):
        x = _floats(clips)
        check_tubelets(x.shape[1:4])
        x = nn.Conv(self.width, TUBELET, strides=TUBELET, padding="VALID", name="embedding")(x)
        n, c = x.shape[0], x.shape[-1]
        x = x.reshape(n, -1, c)
        posemb = self.param("pos_embedding", nn.initializers.normal(stddev=1 / np.sqrt(c)), (1, x.shape[1], c))
        x = x + posemb.astype(x.dtype)
        encoder = vit.Encoder(
            self.depth, self.mlp_dim, self.num_heads, self.drop_path, self.attention, self.remat, name="Transformer"
        )
        x = jnp.mean(encoder(x, not train), axis=1)
        return nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros, name="head")(x)


def vivit_ti16(num_classes: int, drop_path: float = 0.0, attention: str = "xla", remat: str = "none") -> TubeletViT:
    width, depth, mlp_dim, heads = vit.VARIANTS["vit-ti16"]
    implementation = "xla" if attention == "auto" else attention
    return TubeletViT(num_classes, width, depth, mlp_dim, heads, drop_path, implementation, remat == "blocks")


def _floats(clips):
    """(B, T, H, W, C) as the convolutions take it; a model of clips refuses anything else in one line."""
    if clips.ndim != 5:
        raise UsageError(
            f"the video models take clips (batch, frames, height, width, channels), but got {clips.shape}; "
            f"use --pipeline video"
        )
    return clips if jnp.issubdtype(clips.dtype, jnp.floating) else clips.astype(jnp.float32)


def check_tubelets(sides: tuple[int, int, int]) -> None:
    """Found while the model is traced (at initialisation): shapes are static."""
    if any(side % cut for side, cut in zip(sides, TUBELET)):
        raise UsageError(
            f"--model vivit-ti16 cuts clips into {'×'.join(map(str, TUBELET))} tubelets (frames×height×width), but the "
            f"pipeline gives {'×'.join(map(str, sides))}; use an even --clip-frames and an --image-size divisible by "
            f"{vit.PATCH}"
        )
