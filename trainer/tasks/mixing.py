"""--mixup and --cutmix inside the step, on the device, with timm's semantics (timm.data.Mixup, mode "batch").

Per batch, one weight λ: mixup blends every image with its partner by λ ~ Beta(α, α); cutmix pastes a
box of the partner whose side is √(1-λ) of the image's (centre uniform, clipped at the borders) and
then sets λ to the share of the image left as it was (timm's `correct_lam`). With both on, each batch
takes cutmix or mixup at even odds (timm's switch_prob 0.5); mixing every batch (mix_prob 1). The
partner of row i is row B-1-i of the same batch (timm's `flip(0)`), targets mixed with the same λ:
λ·y_i + (1-λ)·y_{B-1-i}, after label smoothing (timm's order: smooth, then mix).

"The batch" is each device's own rows of a step, under --parallel pmap and sharded alike (sharded's
job-wide rows are split back into the devices' batches), and its key is the step's dropout key of that
device folded with STREAM: the same mixing in either mode, reproducible from --seed, and continued by
a resumed run (state.py keeps the key and the step count). Padding rows (a shard's tail) mix like any
other; their loss is masked out as always.

Why on the device, not in DALI: the step already holds the batch in device memory, and mixing is a few
elementwise passes over it (~150 MB for ViT-S/16's 256×224×224×3 in float16 against ~40 GFLOPs a
sample of step); benchmarks/imagenet.py measures the step with and without it (`step` against
`step-unmixed`), which bounds what a DALI-side version could save.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

STREAM = 0x6D6978  # "mix": a stream of its own beside dropout's, from the same per-step, per-device key
SWITCH_PROB = 0.5


@dataclass(frozen=True)
class Mixing:
    mixup: float = 0.0  # Beta's α; 0: off
    cutmix: float = 0.0

    @property
    def on(self) -> bool:
        return bool(self.mixup or self.cutmix)


def mix(key, images, targets, mixing: Mixing):
    """One batch (rows, H, W, C) and its float targets (rows, classes), mixed with its reverse."""
    k_switch, k_mixup, k_cutmix, k_box = jax.random.split(key, 4)
    flipped, flipped_targets = images[::-1], targets[::-1]
    results = []
    if mixing.mixup:
        lam = jax.random.beta(k_mixup, mixing.mixup, mixing.mixup)
        mixed = images * lam.astype(images.dtype) + flipped * (1 - lam).astype(images.dtype)
        results.append((mixed, lam))
    if mixing.cutmix:
        lam = jax.random.beta(k_cutmix, mixing.cutmix, mixing.cutmix)
        inside, lam = box(k_box, lam, images.shape[1], images.shape[2])
        results.append((jnp.where(inside[None, :, :, None], flipped, images), lam))
    if len(results) == 2:
        use_cutmix = jax.random.bernoulli(k_switch, SWITCH_PROB)
        pick = lambda a, b: jnp.where(use_cutmix, b, a)
        results = [jax.tree.map(pick, results[0], results[1])]
    mixed, lam = results[0]
    return mixed, lam * targets + (1 - lam) * flipped_targets


def box(key, lam, height: int, width: int):
    """timm's rand_bbox: a (height, width) mask of the pasted box, and λ corrected to the area left."""
    ratio = jnp.sqrt(1 - lam)
    cut_h, cut_w = (height * ratio).astype(jnp.int32), (width * ratio).astype(jnp.int32)
    k_y, k_x = jax.random.split(key)
    cy, cx = jax.random.randint(k_y, (), 0, height), jax.random.randint(k_x, (), 0, width)
    y0, y1 = jnp.clip(cy - cut_h // 2, 0, height), jnp.clip(cy + cut_h // 2, 0, height)
    x0, x1 = jnp.clip(cx - cut_w // 2, 0, width), jnp.clip(cx + cut_w // 2, 0, width)
    rows, cols = jnp.arange(height)[:, None], jnp.arange(width)[None, :]
    inside = (rows >= y0) & (rows < y1) & (cols >= x0) & (cols < x1)
    return inside, 1 - ((y1 - y0) * (x1 - x0)) / (height * width)


def mix_devices(keys, images, targets, mixing: Mixing):
    """Rows of `len(keys)` devices' batches end to end (a sharded step's), each mixed within itself."""
    devices = keys.shape[0]
    split = lambda x: x.reshape(devices, -1, *x.shape[1:])
    mixed, goal = jax.vmap(mix, (0, 0, 0, None))(keys, split(images), split(targets), mixing)
    return mixed.reshape(images.shape), goal.reshape(targets.shape)
