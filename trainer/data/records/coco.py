"""COCO detection splits (`dali-launch data synth --format detection`): SPLIT/annotations.json and the images
it names beside it, as `fn.readers.coco(file_root=SPLIT, annotations_file=...)` numbers them: by image id, or
in the order of its `images` list (what `without` gives it). The boxes are the detection pipeline's to read;
a source here gives each image and -1, as an image of several objects has no one class id."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from dali_launch.trainer.data.images import check_file
from dali_launch.trainer.data.sample_scan import Listing, Scan, stamp

MAX_OBJECTS = 16  # objects an image the detection pipeline pads its boxes to (the data checks refuse more)
NO_CLASS = -1


def annotations(path: str | Path) -> dict:
    """A split's annotations file as JSON; ValueError where it is none or lacks COCO's two lists."""
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot be read as JSON ({type(e).__name__}: {e})") from None
    if not isinstance(found, dict) or not all(isinstance(found.get(k), list) for k in ("images", "annotations")):
        raise ValueError("has no COCO 'images' and 'annotations' lists")
    return found


def file_names(found: dict) -> list[str]:
    """The images of an annotations file in the order DALI's reader reads them: by image id."""
    return [image["file_name"] for image in sorted(found["images"], key=lambda image: image["id"])]


class CocoImages:
    """`images`: the reader's own list (bad_samples.py leaves bad files out of it), else the annotations' order."""

    def __init__(self, file_root: str, annotations_file: str, images: list[str] | None = None):
        self.root = file_root
        self.files = list(images) if images else file_names(annotations(annotations_file))

    def __len__(self) -> int:
        return len(self.files)

    def keys(self) -> list[bytes]:
        return [name.encode() for name in self.files]

    def read(self, index: int) -> tuple[np.ndarray, int]:
        return np.fromfile(os.path.join(self.root, self.files[index]), np.uint8), NO_CLASS


def source(kwargs: dict) -> CocoImages:
    return CocoImages(kwargs["file_root"], kwargs["annotations_file"], kwargs.get("images"))


def listing(kwargs: dict) -> Listing:
    """The split's images for the bad-sample scan, fingerprinted by the annotations file, the folder (adding or
    removing an image touches it) and the names: as class folders are, an image rewritten in place is not seen,
    so the bad ones a cached scan names are checked again each time."""
    images = source(kwargs)
    paths = [os.path.join(images.root, name) for name in images.files]
    stamps = stamp(kwargs["annotations_file"]) + stamp(images.root) + "\n".join(images.files)
    fingerprint = hashlib.sha256(stamps.encode()).hexdigest()
    return Listing(
        str(Path(images.root)), len(paths), fingerprint, paths.__getitem__, lambda i: check_file(paths[i]), True
    )


def without(kwargs: dict, scan: Scan) -> dict:
    """The reader's arguments with the scan's bad images left out of its own list of images."""
    bad = {b.index for b in scan.bad}
    return {**kwargs, "images": [name for i, name in enumerate(source(kwargs).files) if i not in bad]}
