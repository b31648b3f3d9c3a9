"""JPEG class folders (SPLIT/<class>/<file>): classes numbered in sorted order and files sorted within
each, as `fn.readers.file(file_root=...)` numbers them."""

from __future__ import annotations

import os

import numpy as np

READER = "file"
# DALI's readers.file takes these (case-insensitive); anything else in a class folder is skipped.
EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".pnm", ".ppm", ".pgm", ".pbm", ".jp2", ".webp")


class ClassFolders:
    """`files`/`labels`: the reader's own list (bad_samples.py leaves bad files out of it), else the folders'."""

    def __init__(self, root: str, files: list[str] | None = None, labels: list[int] | None = None):
        self.root = root
        if files:
            self.files = list(zip(files, labels or range(len(files))))
            return
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.files = [
            (os.path.join(name, file), label)
            for label, name in enumerate(classes)
            for file in sorted(os.listdir(os.path.join(root, name)))
            if file.lower().endswith(EXTENSIONS)
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


def source(kwargs: dict) -> ClassFolders:
    return ClassFolders(kwargs["file_root"], kwargs.get("files"), kwargs.get("labels"))
