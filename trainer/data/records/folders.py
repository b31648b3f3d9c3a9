"""Class folders (SPLIT/<class>/<file>) of images, or of sounds (the audio format's, which names its
`file_filters`): classes numbered in sorted order and files sorted within each, as `fn.readers.file(file_root=...)`
numbers them; each file checked as what it is (images.py, sounds.py)."""

from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path

import numpy as np

from dali_launch.trainer.data import images, sounds
from dali_launch.trainer.data.sample_scan import Listing, Scan, stamp

# DALI's readers.file takes these (case-insensitive); anything else in a class folder is skipped.
EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".pnm", ".ppm", ".pgm", ".pbm", ".jp2", ".webp")


class ClassFolders:
    """`files`/`labels`: the reader's own list (bad_samples.py leaves bad files out of it), else the folders'."""

    def __init__(self, root: str, files: list[str] | None = None, labels: list[int] | None = None, filters=None):
        self.root = root
        if files:
            self.files = list(zip(files, labels or range(len(files))))
            return
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.files = [
            (os.path.join(name, file), label)
            for label, name in enumerate(classes)
            for file in sorted(os.listdir(os.path.join(root, name)))
            if _taken(file, filters)
        ]

    def __len__(self) -> int:
        return len(self.files)

    def keys(self) -> list[bytes]:
        return [name.encode() for name, _ in self.files]

    def file_list(self) -> str:
        """The files as DALI's `fn.readers.file(file_list=...)` reads them: `NAME LABEL` lines, NAME relative
        to the root (DALI takes the label after the last space, so names may hold spaces)."""
        return "".join(f"{name} {label}\n" for name, label in self.files)

    def read(self, index: int) -> tuple[np.ndarray, int]:
        name, label = self.files[index]
        return np.fromfile(os.path.join(self.root, name), np.uint8), label


def _taken(file: str, filters) -> bool:
    """Whether DALI's reader lists `file`: by its `file_filters` (case-insensitive globs), else by our images'."""
    if filters is None:
        return file.lower().endswith(EXTENSIONS)
    return any(fnmatch.fnmatch(file.lower(), pattern.lower()) for pattern in filters)


def check_file(path: str) -> str | None:
    """What is wrong with a sample file for its decoder: a sound's for the audio decoder, else an image's."""
    return sounds.check_file(path) if sounds.is_sound(path) else images.check_file(path)


def source(kwargs: dict) -> ClassFolders:
    return ClassFolders(kwargs["file_root"], kwargs.get("files"), kwargs.get("labels"), kwargs.get("file_filters"))


def listing(kwargs: dict) -> Listing:
    """The split's files for the bad-sample scan. Their fingerprint is the file names and the folders'
    modification times, not a stat of every file (1.28 M files: 5 s against 13 s on 2 cores): adding,
    removing or renaming a file (cp, mv, rsync) touches its folder. A file rewritten in place is not seen,
    so the bad ones a cached scan names are checked again each time: one that was fixed so is good again."""
    root = kwargs["file_root"]
    files = source(kwargs).files
    paths = [os.path.join(root, name) for name, _ in files]
    folders_of = sorted({os.path.dirname(p) for p in paths} | {root})
    names = "\n".join(name for name, _ in files)
    stamped = hashlib.sha256(("".join(stamp(f) for f in folders_of) + names).encode()).hexdigest()
    return Listing(str(Path(root)), len(paths), stamped, paths.__getitem__, lambda i: check_file(paths[i]), True)


def without(kwargs: dict, scan: Scan) -> dict:
    """The reader's arguments with the scan's bad files left out of its own file list."""
    bad = {b.index for b in scan.bad}
    kept = [entry for i, entry in enumerate(source(kwargs).files) if i not in bad]
    return {**kwargs, "files": [name for name, _ in kept], "labels": [int(label) for _, label in kept]}
