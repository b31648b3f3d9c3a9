"""Vision Transformers (`--model vit-ti16|vit-s16|vit-b16`), as big_vision's models/vit.py builds them.

A 16×16/16 convolution embeds the patches, a learned position embedding is added, pre-LayerNorm
encoder blocks (attention, then an MLP 4× wide with GELU) run over the tokens, a final LayerNorm,
then the tokens are pooled (`--vit-pool gap`: their mean, big_vision's ImageNet recipe; `cls`: a
class token) into a zero-initialised head. Initialisers are big_vision's: Xavier-uniform kernels
in the blocks, MLP biases N(0, 1e-6), position embedding N(0, 1/√width), a zero class token.

Beyond big_vision: `--drop-path` (stochastic depth, DeiT's rule: block i of D drops its residual
branches with rate drop_path·i/(D-1), per sample, from the `dropout` RNG stream the trainer gives
while training), the attention implementation (attention.py) and `--remat blocks` (each block's
activations recomputed in the backward pass rather than kept: big_vision's `remat_policy`, for models
whose activations, not parameters, fill the device; the parameters are the same). Any image side divisible by 16
works (a 32×32 image is 4 tokens); parameter names follow big_vision's (embedding, pos_embedding,
cls, Transformer/encoderblock/... stacked over the blocks, Transformer/encoder_norm, head), which layer decay reads.
"""

from __future__ import annotations

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model import attention
from dali_launch.trainer.model.models import as_images

PATCH = 16
# name -> (width, depth, MLP width, heads), big_vision's Ti/S/B
VARIANTS = {"vit-ti16": (192, 12, 768, 3), "vit-s16": (384, 12, 1536, 6), "vit-b16": (768, 12, 3072, 12)}


def drop_path(x, rate, module: nn.Module, deterministic: bool):
    """Each sample's residual branch kept with probability 1 - rate, scaled to keep its expectation."""
    if deterministic:
        return x
    keep = jax.random.bernoulli(module.make_rng("dropout"), 1 - rate, (x.shape[0],) + (1,) * (x.ndim - 1))
    return jnp.where(keep, x / (1 - rate).astype(x.dtype), jnp.zeros_like(x))


class MlpBlock(nn.Module):
    mlp_dim: int

    @nn.compact
    def __call__(self, x):
        inits = {"kernel_init": nn.initializers.xavier_uniform(), "bias_init": nn.initializers.normal(stddev=1e-6)}
        y = nn.gelu(nn.Dense(self.mlp_dim, **inits)(x))
        return nn.Dense(x.shape[-1], **inits)(y)


class Encoder1DBlock(nn.Module):
    """One pre-LayerNorm block; `rate` is its drop-path rate (scanned: each block has its own)."""

    mlp_dim: int
    num_heads: int
    attention: str = "xla"
    deterministic: bool = True  # no drop path (evaluation, or --drop-path 0)

    @nn.compact
    def __call__(self, x, rate):
        y = nn.MultiHeadDotProductAttention(
            num_heads=self.num_heads,
            kernel_init=nn.initializers.xavier_uniform(),
            attention_fn=partial(attention.attend, implementation=self.attention),
        )(*[nn.LayerNorm()(x)] * 2)
        x = x + drop_path(y, rate, self, self.deterministic)
        y = MlpBlock(self.mlp_dim)(nn.LayerNorm()(x))
        return x + drop_path(y, rate, self, self.deterministic), None


def unroll(depth: int, remat: bool, backend: str) -> int:
    """The blocks' scan unrolled on GPUs (Encoder), but never under --remat blocks: unrolled, each block's
    recomputation hangs on its saved input alone, so XLA schedules it beside the forward pass and keeps every
    block's activations again, and the remat saves nothing; in the loop each recomputation is part of the
    backward loop's body (tests/test_vit.py compiles both; docs/scale.md)."""
    return 1 if remat or backend == "cpu" else depth


class Encoder(nn.Module):
    """The blocks as one `nn.scan` (big_vision's scan=True layout: each block parameter stacked over the
    blocks, axis 0). XLA:CPU compiles the loop body once: on a loaded 2-core machine vit-ti16's training
    step compiled in 14 s looped, 23 s unrolled (its init 9 s against 20 s). On GPUs the loop is unrolled,
    so XLA sees every block, as a Python loop of blocks would give it; the parameters are the same. Under
    --remat blocks it stays a loop everywhere (`unroll`)."""

    depth: int
    mlp_dim: int
    num_heads: int
    drop_path: float = 0.0
    attention: str = "xla"
    remat: bool = False  # each block's activations recomputed in the backward pass (jax.checkpoint)

    @nn.compact
    def __call__(self, x, deterministic: bool):
        # prevent_cse=True: jax.checkpoint's docs call False safe under a scan's loop, but on one H200, with the
        # blocks then unrolled there, XLA:GPU merged the recomputation away with False (vit-b16's gradient, batch
        # 64, f32: 11.67 GiB of temporaries with remat and without; 1.82 with True). False in the loop that remat
        # now keeps is not measured on a GPU.
        block = nn.remat(Encoder1DBlock, prevent_cse=True) if self.remat else Encoder1DBlock
        blocks = nn.scan(
            block,
            variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            length=self.depth,
            unroll=unroll(self.depth, self.remat, jax.default_backend()),
        )
        rates = jnp.linspace(0.0, self.drop_path, self.depth)  # DeiT's rule: 0 at the first block
        deterministic = deterministic or not self.drop_path
        x, _ = blocks(self.mlp_dim, self.num_heads, self.attention, deterministic, name="encoderblock")(x, rates)
        return nn.LayerNorm(name="encoder_norm")(x)


class ViT(nn.Module):
    num_classes: int = 1000
    width: int = 384
    depth: int = 12
    mlp_dim: int = 1536
    num_heads: int = 6
    pool: str = "gap"
    drop_path: float = 0.0
    attention: str = "xla"
    remat: bool = False

    @nn.compact
    def __call__(self, images, train: bool = False):
        x = as_images(images)
        x = x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)  # bf16 stays bf16
        check_sides(x.shape[1:3])
        x = nn.Conv(self.width, (PATCH, PATCH), strides=(PATCH, PATCH), padding="VALID", name="embedding")(x)
        n, h, w, c = x.shape
        x = x.reshape(n, h * w, c)
        posemb = self.param("pos_embedding", nn.initializers.normal(stddev=1 / np.sqrt(c)), (1, h * w, c))
        x = x + posemb.astype(x.dtype)
        if self.pool == "cls":
            cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
            x = jnp.concatenate([jnp.tile(cls.astype(x.dtype), (n, 1, 1)), x], axis=1)
        encoder = Encoder(
            self.depth, self.mlp_dim, self.num_heads, self.drop_path, self.attention, self.remat, name="Transformer"
        )
        x = encoder(x, not train)
        x = x[:, 0] if self.pool == "cls" else jnp.mean(x, axis=1)
        return nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros, name="head")(x)


def check_sides(sides: tuple[int, int]) -> None:
    """Found while the model is traced (at initialisation): shapes are static."""
    if any(side % PATCH for side in sides):
        raise UsageError(
            f"the ViTs cut images into {PATCH}×{PATCH} patches, but the pipeline gives "
            f"{sides[0]}×{sides[1]}; use an --image-size divisible by {PATCH}, e.g. {max(PATCH, sides[0] // PATCH * PATCH)}"
        )


def tokens(sides: int | tuple[int, int], pool: str) -> int:
    """The sequence the encoder attends over, for square images of side `sides` or inputs of (height, width) `sides`
    (a spectrogram's: spectrograms.input_sides)."""
    height, width = (sides, sides) if isinstance(sides, int) else sides
    return (height // PATCH) * (width // PATCH) + (pool == "cls")


def attention_shape(model: str, sides: int | tuple[int, int], pool: str) -> tuple[int, int, int] | None:
    """(tokens, heads, head_dim) of a built-in ViT's attention; None for any other --model."""
    if model not in VARIANTS:
        return None
    width, _, _, heads = VARIANTS[model]
    return tokens(sides, pool), heads, width // heads


def layers_of(path: tuple[str, ...], depth: int):
    """A parameter's layer for layer-wise decay, BEiT's numbering: 0 for the patch and position embeddings
    and the class token, depth + 1 for the final norm and the head, and for the blocks' stacked parameters
    the array 1..depth (block i is layer i + 1) along their first axis."""
    if path[0] in ("embedding", "pos_embedding", "cls"):
        return 0
    if path[:2] == ("Transformer", "encoderblock"):
        return np.arange(1, depth + 1)
    return depth + 1


def _factory(name: str):
    width, depth, mlp_dim, heads = VARIANTS[name]

    def factory(
        num_classes: int, drop_path: float = 0.0, vit_pool: str = "gap", attention: str = "xla", remat: str = "none"
    ) -> ViT:
        implementation = "xla" if attention == "auto" else attention  # `auto` is the plan's (plan/step.py)
        return ViT(num_classes, width, depth, mlp_dim, heads, vit_pool, drop_path, implementation, remat == "blocks")

    factory.__name__ = name.replace("-", "_")
    return factory


vit_ti16, vit_s16, vit_b16 = (_factory(name) for name in VARIANTS)
