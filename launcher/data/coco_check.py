"""The checks of a detection data set (--pipeline detection: COCO splits) before any job starts.

DALI's COCO reader fails at the pipeline's build, with a C++ traceback, on an annotations file that is
missing or not JSON and on an image it names that is not there; class ids out of range would train silently
(a heatmap channel that does not exist renders nothing). Each split's annotations are read once here: their
images, their class ids, and no image holding more objects than the pipeline keeps.
"""

from __future__ import annotations

import collections
from pathlib import Path

from dali_launch.trainer.data import formats
from dali_launch.trainer.data.records import coco
from dali_launch.trainer.errors import UsageError


def check_detection(path: Path, origin: str, num_classes: int) -> None:
    """--pipeline detection's data set (formats.py names this its check)."""
    fix = f"re-create the data set with `{formats.get('detection').make.format(path='OUT')}`"
    for split in ("training", "testing"):
        found = path / split / formats.COCO_ANNOTATIONS
        if not found.is_file():
            raise UsageError(f"{path / split} has no {formats.COCO_ANNOTATIONS} for --pipeline detection; {fix}")
        try:
            annotations = coco.annotations(found)
            names = {image["id"]: image["file_name"] for image in annotations["images"]}
            objects = [_object(a, names) for a in annotations["annotations"]]
        except KeyError as e:
            raise UsageError(f"{found} is not a COCO annotations file (an entry has no {e}); {fix}") from None
        except (ValueError, TypeError) as e:
            raise UsageError(f"{found} is not a COCO annotations file ({e}); {fix}") from None
        missing = next((name for name in names.values() if not (path / split / name).is_file()), None)
        if missing:
            raise UsageError(f"{found} names {missing}, which is not in {path / split}; {fix}")
        _check_classes(found, objects, num_classes)
        _check_crowds(found, objects)


def _object(annotation: dict, names: dict) -> tuple[int, str]:
    """(class id, image file) of one annotation."""
    image = annotation["image_id"]
    if image not in names:
        raise ValueError(f"an object of image id {image}, which its images do not list")
    return int(annotation["category_id"]), names[image]


def _check_classes(found: Path, objects: list[tuple[int, str]], num_classes: int) -> None:
    """A class id out of range, named: a negative one first, else the largest, so one --num-classes fixes it."""
    if not objects:
        return
    low, high = min(objects, key=lambda o: o[0]), max(objects, key=lambda o: o[0])
    if low[0] < 0:
        raise UsageError(f"{found} gives an object of {low[1]} class {low[0]}; class ids count from 0")
    if high[0] >= num_classes:
        raise UsageError(
            f"--num-classes {num_classes} but {found} gives an object of {high[1]} class {high[0]}; "
            f"use --num-classes {high[0] + 1} or more"
        )


def _check_crowds(found: Path, objects: list[tuple[int, str]]) -> None:
    """No image with more objects than the pipeline pads to: the rest would be left out without a word."""
    counts = collections.Counter(name for _, name in objects)
    name, most = max(counts.items(), key=lambda item: item[1], default=("", 0))
    if most > coco.MAX_OBJECTS:
        raise UsageError(
            f"{found} gives {name} {most} objects, more than the {coco.MAX_OBJECTS} an image the detection "
            f"pipeline keeps; split the image, or leave objects out of the annotations"
        )
