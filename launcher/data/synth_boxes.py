"""`dali-launch data synth --format detection`: images of 1 to 4 coloured shapes on a plain background, each
shape's box and class in COCO's layout (SPLIT/annotations.json beside SPLIT/NNNNNNNN.jpg).

A class is a hue (evenly spaced around the colour wheel), whatever the shape (ellipse, rectangle or diamond),
so a small network can learn it in a few epochs on a CPU. Shapes do not overlap, and each box is the shape's
own: a detector that finds a shape finds its box. An image's layout (its size, its objects' classes and boxes)
is a pure function of (seed, split, index) drawn apart from its pixels, so the unit writing a split's first
shard writes the whole split's annotations from the layouts alone while other workers draw the images.
"""

from __future__ import annotations

import colorsys
import io
import json
from dataclasses import dataclass

import numpy as np

from dali_launch.launcher.data.synth_images import SPLIT_IDS, image_shape
from dali_launch.trainer.data.formats import COCO_ANNOTATIONS

MOST_OBJECTS = 4  # objects an image holds: 1 to this many
SIDES = (0.18, 0.45)  # an object's width, as a fraction of the image's shorter side
TRIES = 30  # placements tried for an object before it is left out (the first one always fits)
QUALITY = 90


@dataclass(frozen=True)
class Thing:
    category: int
    box: tuple[int, int, int, int]  # x, y, width, height in pixels (COCO's bbox)
    shape: int  # 0 ellipse, 1 rectangle, 2 diamond


@dataclass(frozen=True)
class Layout:
    height: int
    width: int
    things: tuple[Thing, ...]


def layout(seed: int, split: str, index: int, classes: int, scale: float) -> Layout:
    """Image `index`'s size and objects: 1 to MOST_OBJECTS of random classes, sizes and places, none overlapping."""
    rng = np.random.default_rng([seed, SPLIT_IDS[split], index, 1])
    height, width = image_shape(rng, scale)
    side, things = min(height, width), []
    for _ in range(int(rng.integers(1, MOST_OBJECTS + 1))):
        category, shape = int(rng.integers(classes)), int(rng.integers(3))
        for _ in range(TRIES):
            w = max(4, round(side * rng.uniform(*SIDES)))
            h = min(height, max(4, round(w * rng.uniform(0.7, 1.4))))
            x, y = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            if not any(_overlap((x, y, w, h), thing.box) for thing in things):
                things.append(Thing(category, (x, y, w, h), shape))
                break
    return Layout(height, width, tuple(things))


def _overlap(a: tuple, b: tuple, gap: int = 2) -> bool:
    """Whether two boxes come closer than `gap` pixels: apart, each shape's box holds its shape alone."""
    return (
        a[0] < b[0] + b[2] + gap and b[0] < a[0] + a[2] + gap and a[1] < b[1] + b[3] + gap and b[1] < a[1] + a[3] + gap
    )


def colour(category: int, classes: int) -> np.ndarray:
    """A class's colour: its own hue, saturated and bright, so it stands out of the greyish background."""
    return np.array(colorsys.hsv_to_rgb(category / classes, 0.85, 0.95), np.float32) * 255


def render(seed: int, split: str, index: int, drawn: Layout, classes: int) -> np.ndarray:
    """The (height, width, 3) uint8 pixels of a layout: a shaded greyish background, the shapes, mild noise."""
    rng = np.random.default_rng([seed, SPLIT_IDS[split], index, 2])
    height, width = drawn.height, drawn.width
    y, x = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
    angle, grey = float(rng.uniform(0, 2 * np.pi)), float(rng.uniform(50, 190))
    ramp = (np.cos(angle) * x / width + np.sin(angle) * y / height) * float(rng.uniform(-40, 40))
    image = grey + rng.uniform(-12, 12, 3).astype(np.float32) + ramp[..., None]
    for thing in drawn.things:
        inside = _mask(thing, x, y)
        paint = colour(thing.category, classes) * float(rng.uniform(0.8, 1.05))
        image = np.where(inside[..., None], paint, image)
    image += rng.normal(0, 6, image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def _mask(thing: Thing, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The pixels (by their centres) of a shape inscribed in its box."""
    left, top, w, h = thing.box
    if thing.shape == 1:
        return (x >= left) & (x < left + w) & (y >= top) & (y < top + h)
    dx, dy = np.abs(x - left - w / 2) / (w / 2), np.abs(y - top - h / 2) / (h / 2)
    return dx * dx + dy * dy <= 1 if thing.shape == 0 else dx + dy <= 1


def jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=QUALITY)
    return buf.getvalue()


def file_name(index: int) -> str:
    return f"{index:08d}.jpg"


def coco(seed: int, split: str, count: int, classes: int, scale: float) -> dict:
    """A split's annotations file: every image (id = its index), every object's box, class and area."""
    images, objects = [], []
    for index in range(count):
        drawn = layout(seed, split, index, classes, scale)
        images.append({"id": index, "file_name": file_name(index), "width": drawn.width, "height": drawn.height})
        for thing in drawn.things:
            box = list(thing.box)
            objects.append(
                {
                    "id": len(objects),
                    "image_id": index,
                    "category_id": thing.category,
                    "bbox": box,
                    "area": box[2] * box[3],
                    "iscrowd": 0,
                }
            )
    categories = [{"id": c, "name": f"class-{c}"} for c in range(classes)]
    return {"images": images, "annotations": objects, "categories": categories}


def write_detection(unit) -> int:
    """One unit's images (a synth.Unit); the split's first unit also writes its annotations file."""
    spec, total = unit.spec, 0
    for index in range(unit.start, unit.stop):
        drawn = layout(spec.seed, unit.split, index, spec.classes, spec.image_scale)
        data = jpeg(render(spec.seed, unit.split, index, drawn, spec.classes))
        (unit.folder / file_name(index)).write_bytes(data)
        total += len(data)
    if unit.shard == 0:
        count = spec.train if unit.split == "training" else spec.test
        found = coco(spec.seed, unit.split, count, spec.classes, spec.image_scale)
        (unit.folder / COCO_ANNOTATIONS).write_text(json.dumps(found, sort_keys=True))
    return total
