"""Built-in models, and the contract every `--model` meets.

A model factory is a callable `factory(num_classes: int) -> flax.linen.Module` (a Module class with
a `num_classes` field is one), or, for Flax NNX, `factory(num_classes: int, rngs: nnx.Rngs) ->
flax.nnx.Module` (an nnx.Module class whose constructor takes both is one): a factory that names an
`rngs` parameter is called with `nnx.Rngs(--seed)`, and what it returns decides which contract it
meets (contract.py checks it; nnx_model.py presents an NNX module as the trainer calls a Linen one). The trainer
initialises the module on one zero sample shaped like the pipeline's images and then applies it to
a per-device batch `images` of shape `(batch, *sample_shape)`: it returns logits
`(batch, num_classes)` (checked on the initialisation's own forward pass, and by the launcher where
it knows the pipeline's sample shape).

State and randomness (model/forward.py): a module whose `__call__` takes `train` (or `training`)
is told whether it is training (False at initialisation and evaluation). Collections besides
`params` (BatchNorm's `batch_stats`) are mutable while training, averaged over every device of the
job after each step and kept in checkpoints; evaluation uses them as they are. A `dropout` RNG
stream is given while training: a different key per step and device, reproducible from --seed.
A plain `__call__(self, x)` with params only works as it always did. An NNX module is switched with
its own `train()` / `eval()` instead, keeps its statistics in nnx.BatchStat (`batch_stats`) and
draws dropout from the same per-step, per-device stream. registry.create_model makes the module a
`--model` names (model/contract.py checks it). Built in (`--model NAME`):

    mlp       the DALI + Flax example's 784-784-1024-1024-10 MLP, layer for layer
    cnn       a small CNN for 28x28 images; the example's flat 784 vector is reshaped to 28x28x1
    resnet18  ResNet-18 with GroupNorm, for the folders pipeline's HWC crops (any square size)
    resnet50  ResNet-50 v1.5 with BatchNorm, the standard ImageNet model (resnet.py)
    cnn-nnx   the CNN's twin in Flax NNX, layer for layer, for 28x28 grey images (cnn_nnx.py)
    vit-ti16, vit-s16, vit-b16  Vision Transformers as big_vision's (vit.py)
    unet      a small U-Net: per-pixel logits (batch, H, W, num_classes), --task segmentation's (unet.py)
    centernet --task detection's: a small CenterNet returning a dict of heads (centernet.py)
    st-cnn, frame-mean, vivit-ti16  --task video's models of clips (batch, T, H, W, C) (video.py)

A Linen factory that also names `drop_path`, `vit_pool`, `attention` or `remat` as parameters is given those
flags' values (registry.model_options); other factories never see them.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax.numpy as jnp

from dali_launch.trainer.model.pooling import stem_pool


class MLP(nn.Module):
    """784-784-1024-1024-10 with ReLUs, as in DALI's "Training neural network with DALI and Flax"."""

    features: tuple[int, ...] = (784, 1024, 1024)
    num_classes: int = 10

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)  # a no-op for the example's flat pipeline; flattens HWC images
        for width in self.features:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_classes)(x)


def as_images(x):
    """NHWC as it comes, or a flat vector of a square grey image (the example's pipeline) as NHWC."""
    if x.ndim == 4:
        return x
    side = math.isqrt(x.shape[-1])
    return x.reshape(x.shape[0], side, side, 1)


class CNN(nn.Module):
    """3x3 convs of 32 and 64 filters, each with a 2x2 max pool, then 128 and num_classes units:
    ~4 M multiply-adds per 28x28 image, small enough to train on two CPU cores."""

    num_classes: int = 10
    features: tuple[int, ...] = (32, 64)
    hidden: int = 128

    @nn.compact
    def __call__(self, x):
        x = as_images(x)
        for width in self.features:
            x = max_pool_2x2(nn.relu(nn.Conv(width, (3, 3))(x)))
        x = nn.relu(nn.Dense(self.hidden)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.num_classes)(x)


def max_pool_2x2(x):
    """nn.max_pool(x, (2, 2), strides=(2, 2)) for even sides, as a reshape: its gradient is ~2.5x
    cheaper on XLA:CPU than reduce_window's select-and-scatter."""
    n, h, w, c = x.shape
    x = x[:, : h - h % 2, : w - w % 2]  # an odd last row or column is dropped, as max_pool's VALID does
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def _norm(x, scale_init=nn.initializers.ones):
    """GroupNorm: no batch statistics to keep in sync across devices or to carry beside params."""
    return nn.GroupNorm(num_groups=math.gcd(32, x.shape[-1]), scale_init=scale_init)(x)


class ResidualBlock(nn.Module):
    filters: int
    strides: int = 1

    @nn.compact
    def __call__(self, x):
        y = nn.relu(_norm(nn.Conv(self.filters, (3, 3), self.strides, use_bias=False)(x)))
        # Each block starts as the identity ("zero-init residual", Goyal et al. 2017): SGD at the
        # example's lr 0.1 then trains it without a warm-up.
        y = _norm(nn.Conv(self.filters, (3, 3), use_bias=False)(y), scale_init=nn.initializers.zeros)
        if x.shape != y.shape:
            x = _norm(nn.Conv(self.filters, (1, 1), self.strides, use_bias=False)(x))
        return nn.relu(x + y)


class ResNet18(nn.Module):
    """ResNet-18's stages (2, 2, 2, 2 blocks of 64..512 filters). Images under 64 pixels get a
    3x3 stem without pooling (the CIFAR variant): a 7x7/2 stem and a pool would leave 7x7 of 28x28."""

    num_classes: int = 10
    width: int = 64
    stages: tuple[int, ...] = (2, 2, 2, 2)
    pool_grad: str = "scatter"  # --pool-grad resolved (model/pooling.py)

    @nn.compact
    def __call__(self, x):
        x = as_images(x).astype(jnp.float32)
        small = x.shape[1] < 64
        x = nn.Conv(self.width, (3, 3) if small else (7, 7), 1 if small else 2, use_bias=False)(x)
        x = nn.relu(_norm(x))
        if not small:
            x = stem_pool(x, self.pool_grad)
        for stage, blocks in enumerate(self.stages):
            for block in range(blocks):
                x = ResidualBlock(self.width * 2**stage, 2 if stage and not block else 1)(x)
        return nn.Dense(self.num_classes)(jnp.mean(x, axis=(1, 2)))
