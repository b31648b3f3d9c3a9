"""Synthetic scenes with masks: the pixels behind `dali-launch data synth --format segmentation`.

Class 0 is the background: a texture in its own palette over the whole image. On it lie one to three objects,
each of a class 1..C-1 that owns its look (synth_images.class_look: a colour, a texture frequency and
orientation, a shape); the mask holds each pixel's class, a later object covering an earlier one. Shading,
exposure and sensor noise as synth_images draws them vary every image, so a model tells the classes apart by
colour and texture over a neighbourhood, not by a pixel's exact value. Objects cycle through the classes, so
each class is seen alike. A scene is a pure function of (seed, split, index): the same bytes whichever worker
makes it.
"""

from __future__ import annotations

import io

import numpy as np

from dali_launch.launcher.data.synth_images import (
    QUALITIES,
    SPLIT_IDS,
    ClassLook,
    _clutter,
    _noise,
    _object_mask,
    class_look,
    image_shape,
)

MAX_OBJECTS = 3
MAX_CLASSES = 256  # a mask is an 8-bit grey PNG: one grey level a class


def scene(seed: int, split: str, index: int, classes: int, scale: float) -> tuple[bytes, bytes]:
    """The JPEG of one scene and the PNG of its mask (class ids 0..classes-1 as grey levels)."""
    from PIL import Image

    rng = np.random.default_rng([seed, SPLIT_IDS[split], index])
    height, width = image_shape(rng, scale)
    quality = int(rng.integers(QUALITIES[0], QUALITIES[1] + 1))
    pixels, mask = render(seed, rng, index, classes, (height, width))
    image, png = io.BytesIO(), io.BytesIO()
    Image.fromarray(pixels).save(image, format="JPEG", quality=quality)
    Image.fromarray(mask, mode="L").save(png, format="PNG")
    return image.getvalue(), png.getvalue()


def render(seed: int, rng: np.random.Generator, index: int, classes: int, size: tuple[int, int]):
    """(height, width, 3) uint8 pixels and the (height, width) uint8 mask of one scene."""
    height, width = size
    side = min(height, width)
    y = (np.arange(height, dtype=np.float32)[:, None] - height / 2) / side
    x = (np.arange(width, dtype=np.float32)[None, :] - width / 2) / side
    palette, mix = _look(class_look(seed, 0), rng, x, y)
    image = palette[0] + (palette[1] - palette[0]) * mix
    mask = np.zeros((height, width), np.uint8)
    for k in range(int(rng.integers(1, MAX_OBJECTS + 1))):
        label = 1 + (index + k) % (classes - 1)
        look = class_look(seed, label)
        inside = _object_mask(look.shape, rng, x, y)
        palette, mix = _look(look, rng, x, y)
        image = np.where(inside[..., None], palette[2] * (0.85 + 0.3 * mix), image)
        mask[inside] = label
    image += _clutter(rng, height, width)
    image *= float(rng.uniform(0.7, 1.2))  # exposure
    image += _noise(rng, height, width)
    return np.clip(image, 0, 255).astype(np.uint8), mask


def _look(look: ClassLook, rng: np.random.Generator, x: np.ndarray, y: np.ndarray):
    """A class's palette, jittered, and its texture (H, W, 1) in 0..1 at a random phase, as synth_images draws them."""
    angle, frequency = look.angle + float(rng.normal(0, 0.25)), look.frequency * float(rng.uniform(0.85, 1.15))
    phase = float(rng.uniform(0, 2 * np.pi))
    wave = np.sin(2 * np.pi * frequency * (x * np.cos(angle) + y * np.sin(angle)) + phase)
    return look.palette + rng.normal(0, 12, (3, 3)).astype(np.float32), (0.5 + 0.5 * wave)[..., None]
