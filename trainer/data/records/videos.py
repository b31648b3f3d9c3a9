"""Video clips (`--pipeline video`): class folders of clips (SPLIT/<class>/<name>.webm, classes numbered in
sorted order, files sorted within each, as DALI's readers number class folders), or a file list SPLIT/
file_list.txt of `NAME LABEL` lines (DALI's `file_list` form, NAME relative to SPLIT). Either way the reader is
given absolute `filenames` and their `labels`: `without` leaves a bad clip out of them, and every clip's frame
count (`frames`, from its container: clips.py) is kept in the per-user cache under the split's fingerprint, so
the pipeline knows how many frames every clip of a split has before DALI opens one (its training windows, its
longest test clip)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from dali_launch.trainer.cache import cache_root
from dali_launch.trainer.data import clips
from dali_launch.trainer.data.sample_scan import Listing, Scan, stamp
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import write_atomic

FILE_LIST = "file_list.txt"  # a split's clips and labels as lines, where it has no class folders


class Clips:
    """`files` (absolute) and their `labels`, in the reader's order."""

    def __init__(self, kwargs: dict):
        if kwargs.get("filenames"):
            self.files, self.labels = list(kwargs["filenames"]), [int(x) for x in kwargs["labels"]]
        elif kwargs.get("file_list"):
            self.files, self.labels = _listed(kwargs["file_list"])
        else:
            self.files, self.labels = _folders(kwargs["file_root"])
        self.root = str(Path(kwargs.get("file_root") or Path(kwargs.get("file_list", self.files[0])).parent))

    def __len__(self) -> int:
        return len(self.files)

    def keys(self) -> list[bytes]:
        return [os.path.relpath(name, self.root).encode() for name in self.files]

    def read(self, index: int) -> tuple[np.ndarray, int]:
        return np.fromfile(self.files[index], np.uint8), self.labels[index]


def _folders(root: str) -> tuple[list[str], list[int]]:
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    found = [
        (os.path.join(root, name, file), label)
        for label, name in enumerate(classes)
        for file in sorted(os.listdir(os.path.join(root, name)))
        if file.lower().endswith(clips.EXTENSIONS)
    ]
    return [f for f, _ in found], [label for _, label in found]


def _listed(path: str) -> tuple[list[str], list[int]]:
    """A file list's `NAME LABEL` lines (the label after the last space: names may hold spaces)."""
    folder, files, labels = Path(path).parent, [], []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            name, _, label = line.strip().rpartition(" ")
            files.append(str(folder / name))
            labels.append(int(label))
    return files, labels


def source(kwargs: dict) -> Clips:
    return Clips(kwargs)


def _fingerprint(found: Clips, kwargs: dict) -> str:
    """The clips' names and their folders' modification times (class folders), or the file list's stamp: as
    class folders of images are fingerprinted (records/folders.py)."""
    folders = sorted({os.path.dirname(f) for f in found.files})
    marks = [stamp(kwargs["file_list"])] if kwargs.get("file_list") else [stamp(f) for f in folders]
    return hashlib.sha256(("".join(marks) + "\n".join(found.files)).encode()).hexdigest()


def listing(kwargs: dict) -> Listing:
    """The split's clips for the bad-sample scan: each one probed (clips.py)."""
    found = source(kwargs)
    files = found.files
    return Listing(found.root, len(files), _fingerprint(found, kwargs), files.__getitem__, _problem(files), True)


def _problem(files: list[str]):
    return lambda i: clips.problem(files[i])


def without(kwargs: dict, scan: Scan) -> dict:
    """The reader's arguments with the scan's bad clips left out."""
    found, bad = source(kwargs), {b.index for b in scan.bad}
    kept = [i for i in range(len(found)) if i not in bad]
    return {"filenames": [found.files[i] for i in kept], "labels": [found.labels[i] for i in kept]}


def reader_kwargs(kwargs: dict) -> dict:
    """What DALI's reader is given for the split: absolute file names and their labels."""
    found = source(kwargs)
    return {"filenames": found.files, "labels": found.labels}


def frames(kwargs: dict) -> list[int]:
    """Every clip's frame count, in the reader's order (0 for one that cannot be read: the scan names it);
    from the cache while the split is as it was."""
    found = source(kwargs)
    key = hashlib.sha256(f"frames\n{_fingerprint(found, kwargs)}".encode()).hexdigest()[:32]
    cached = cache_root() / "clips" / f"{key}.json"
    try:
        counts = json.loads(cached.read_text())
        if len(counts) == len(found):
            return counts
    except (OSError, ValueError):
        pass
    counts = [_frames(f) for f in found.files]
    try:  # best effort, as the scan's cache
        write_atomic(cached, json.dumps(counts))
    except OSError:
        pass
    return counts


def _frames(path: str) -> int:
    try:
        return clips.probe(path).frames
    except ValueError:
        return 0


def shortest(kwargs: dict, clip_frames: int, stride: int) -> int:
    """Frames (stride apart) the split's shortest clip has; a UsageError naming it where it has fewer than one
    clip's."""
    counts = frames(kwargs)
    least = min(range(len(counts)), key=counts.__getitem__)
    strided = clips.strided(counts[least], stride)
    if strided < clip_frames:
        name = source(kwargs).files[least]
        raise UsageError(
            f"{name} has {counts[least]} frames, fewer than a clip's {clips.span(clip_frames, stride)} (--clip-frames "
            f"{clip_frames} × --clip-stride {stride}); lower --clip-frames or --clip-stride, or leave such clips out"
        )
    return strided
