"""Synthetic photographs with class structure: the pixels behind `dali-launch data synth`.

ImageNet cannot be downloaded here, so the benchmark and the tests need images that cost what
photographs cost (sizes, JPEG qualities and bytes spread like ImageNet's) and that a ResNet can learn
from. Each class owns a palette, a texture frequency and orientation, and an object shape; every image
varies them (jitter, random phase, position, blur of clutter) and adds sensor-like noise, which is
what makes its JPEG as large as a photograph's. An image is a pure function of (seed, split, index):
the same bytes whichever worker makes it.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass

import numpy as np

SPLIT_IDS = {"training": 0, "testing": 1}
QUALITIES = (75, 95)  # JPEG quality, uniform: the range most ImageNet photos were saved at
NOISE = 37.0  # std of the per-pixel noise in 0..255: gives ~110 KB per ImageNet-sized JPEG (measured)


@dataclass(frozen=True)
class ClassLook:
    palette: np.ndarray  # (3, 3) float32: background, second background, object colour
    frequency: float  # texture cycles per short side
    angle: float  # texture orientation, radians
    shape: int  # 0 ellipse, 1 rectangle, 2 diamond


def class_look(seed: int, label: int) -> ClassLook:
    rng = np.random.default_rng([seed, 7, label])
    return ClassLook(
        palette=rng.uniform(20, 235, (3, 3)).astype(np.float32),
        frequency=float(rng.uniform(2, 24)),
        angle=float(rng.uniform(0, np.pi)),
        shape=int(rng.integers(3)),
    )


def image_shape(rng: np.random.Generator, scale: float) -> tuple[int, int]:
    """(height, width) spread like ImageNet's: most 500×375 or 375×500, else short side ~300-500 with
    a tail both ways, aspect ratio 3/4..4/3."""
    if rng.random() < 0.6:
        long, short = 500, 375
    else:
        short = float(np.clip(rng.normal(400, 70), 120, 800))
        long = short * rng.uniform(1.0, 4 / 3)
    height, width = (short, long) if rng.random() < 0.75 else (long, short)  # most photos are landscape
    return max(16, round(height * scale)), max(16, round(width * scale))


def render(look: ClassLook, rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """One (height, width, 3) uint8 image of a class: textured background, an object, clutter, noise."""
    side = min(height, width)
    y = (np.arange(height, dtype=np.float32)[:, None] - height / 2) / side
    x = (np.arange(width, dtype=np.float32)[None, :] - width / 2) / side
    # Python floats, not numpy float64 scalars: those would promote every array to float64 (2× slower).
    angle, frequency = look.angle + float(rng.normal(0, 0.25)), look.frequency * float(rng.uniform(0.85, 1.15))
    phase = float(rng.uniform(0, 2 * np.pi))
    wave = np.sin(2 * np.pi * frequency * (x * np.cos(angle) + y * np.sin(angle)) + phase)
    palette = look.palette + rng.normal(0, 12, (3, 3)).astype(np.float32)
    mix = (0.5 + 0.5 * wave)[..., None]
    image = palette[0] + (palette[1] - palette[0]) * mix
    inside = _object_mask(look.shape, rng, x, y)
    image = np.where(inside[..., None], palette[2] * (0.85 + 0.3 * mix), image)
    image += _clutter(rng, height, width)
    image *= float(rng.uniform(0.7, 1.2))  # exposure
    image += _noise(rng, height, width)
    return np.clip(image, 0, 255).astype(np.uint8)


@functools.cache
def _noise_bank() -> np.ndarray:
    """Gaussian noise to crop from: drawing fresh noise per image took 2/3 of the time to make one."""
    side = 1088  # the largest image: short side 800, aspect 4/3
    return np.random.default_rng(12345).standard_normal((side, side, 3), dtype=np.float32) * NOISE


def _noise(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    bank = _noise_bank()
    top, left = rng.integers(0, len(bank) - height + 1), rng.integers(0, len(bank) - width + 1)
    return bank[top : top + height, left : left + width]


def _object_mask(shape: int, rng: np.random.Generator, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    cx, cy = rng.uniform(-0.35, 0.35, 2).tolist()
    a, b = rng.uniform(0.12, 0.4, 2).tolist()
    dx, dy = np.abs(x - cx) / a, np.abs(y - cy) / b
    if shape == 0:
        return dx * dx + dy * dy < 1
    if shape == 1:
        return (dx < 1) & (dy < 1)
    return dx + dy < 1


def _clutter(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Smooth random shading (a coarse random grid, upsampled): what makes images of a class differ."""
    from PIL import Image

    coarse = rng.uniform(-40, 40, (6, 8, 3)).astype(np.float32)
    planes = [np.asarray(Image.fromarray(coarse[..., c]).resize((width, height), Image.BILINEAR)) for c in range(3)]
    return np.stack(planes, axis=-1)


def jpeg(seed: int, split: str, index: int, label: int, scale: float) -> bytes:
    """The JPEG of one image of the data set: a pure function of its arguments."""
    from PIL import Image

    rng = np.random.default_rng([seed, SPLIT_IDS[split], index])
    height, width = image_shape(rng, scale)
    quality = int(rng.integers(QUALITIES[0], QUALITIES[1] + 1))
    pixels = render(class_look(seed, label), rng, height, width)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def label_of(index: int, classes: int) -> int:
    """Labels cycle through the classes: every class the same count (±1), in both splits."""
    return index % classes
