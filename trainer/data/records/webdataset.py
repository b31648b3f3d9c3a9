"""WebDataset tar shards (`dali-launch data synth --format webdataset`: NAME.jpg + NAME.cls, the class id
in ASCII digits; `--format segmentation`: NAME.jpg + NAME.png, the sample's mask): samples tar after tar (as
given: sorted) in the order of each tar's DALI index, as `fn.readers.webdataset(paths=[...],
index_paths=[...], ext=[image, second])` numbers them. The index (tools/wds2idx.py, v1.2: a line "v1.2
SAMPLES", then per sample "ext offset size name" per member) says where each member's data starts in its tar.
A `.cls` second member is a class id; any other (a mask) is handed on encoded, as the reader gives it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dali_launch.trainer.data.records.common import as_list, read_bytes
from dali_launch.trainer.data.sample_scan import Listing, Scan, image_problem, index_without, shards_stamp

INDEX_VERSION = "v1.2"
CLASS_EXT = "cls"  # the second member that holds a class id; any other is encoded bytes (a mask)


class WebDatasetShards:
    def __init__(self, paths: list[str], index_paths: list[str], ext: list[str]):
        self.paths, self.image_ext, self.class_ext = list(paths), ext[0], ext[1]
        # (tar, {ext: (offset, size, name)}) per sample
        self.samples = [
            (t, {ext: (offset, size, name) for ext, offset, size, name in sample})
            for t, index in enumerate(index_paths)
            for sample in read_index(index)
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def keys(self) -> list[bytes]:
        return [f"{os.path.basename(self.paths[t])}/{m[self.image_ext][2]}".encode() for t, m in self.samples]

    @property
    def encoded_second(self) -> bool:
        """Its second member is handed on encoded (a mask), not as a class id."""
        return self.class_ext != CLASS_EXT

    def read(self, index: int) -> tuple[np.ndarray, int | np.ndarray]:
        tar, members = self.samples[index]
        image, second = (read_bytes(self.paths[tar], *members[ext][:2]) for ext in (self.image_ext, self.class_ext))
        return image, second if self.encoded_second else int(second.tobytes())


def read_index(path: str | Path) -> list[list[tuple[str, int, int, str]]]:
    """Per sample, its (ext, offset, size, name) members; ValueError says what is malformed."""
    lines = Path(path).read_text().splitlines()
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] != INDEX_VERSION or not head[1].isdigit():
        raise ValueError(f"its first line is not '{INDEX_VERSION} SAMPLES'")
    if int(head[1]) != len(lines) - 1:
        raise ValueError(f"it announces {head[1]} samples but lists {len(lines) - 1}")
    out = []
    for n, line in enumerate(lines[1:], 2):
        parts = line.split()
        if not parts or len(parts) % 4 or not all(p.isdigit() for p in parts[1::4] + parts[2::4]):
            raise ValueError(f"line {n} is not 'ext offset size name' per component")
        out.append([(e, int(o), int(s), name) for e, o, s, name in zip(*[iter(parts)] * 4)])
    return out


def source(kwargs: dict) -> WebDatasetShards:
    return WebDatasetShards(as_list(kwargs["paths"]), as_list(kwargs["index_paths"]), source_ext(kwargs))


def source_ext(kwargs: dict) -> list[str]:
    """The reader's `ext`: a list, or DALI's ';'-separated string."""
    return kwargs["ext"].split(";") if isinstance(kwargs["ext"], str) else list(kwargs["ext"])


def native(outputs, kwargs: dict | None = None):
    """(encoded, class ids) of `fn.readers.webdataset(ext=[image, class])`'s outputs (`kwargs`: its arguments);
    a second member other than a class (a mask) as the reader gives it."""
    encoded, second = outputs
    ext = source_ext(kwargs) if kwargs and "ext" in kwargs else []
    if len(ext) > 1 and ext[1] != CLASS_EXT:  # a mask: the pipeline decodes it
        return encoded, second
    return encoded, ascii_class_id(second)


def ascii_class_id(raw, max_digits: int = 9):
    """A `.cls` member (ASCII digits, as the webdataset library writes it) as an int32 class id, in DALI
    arithmetic: Horner's rule over the digits, anything else (a newline) skipped."""
    from nvidia.dali import fn, types  # only inside a pipeline: the launcher reads fingerprints here

    codes = fn.cast(fn.pad(raw, fill_value=0, shape=[max_digits]), dtype=types.INT32)
    value = 0
    for i in range(max_digits):
        code = codes[i]
        digit = (code >= 48) & (code <= 57)
        value = value * (1 + 9 * digit) + digit * (code - 48)
    return fn.cast(value, dtype=types.INT32)


def listing(kwargs: dict) -> Listing:
    """The split's samples for the bad-sample scan, named `sample NAME of SHARD`."""
    tars, indexes = as_list(kwargs["paths"]), as_list(kwargs["index_paths"])
    ext = source(kwargs).image_ext
    samples = [
        (t, {e: (o, s, n) for e, o, s, n in members})
        for t, index in enumerate(indexes)
        for members in read_index(index)
    ]

    def name(i: int) -> str:
        tar, members = samples[i]
        member = members[ext][2] if ext in members else next(iter(members.values()))[2]
        return f"sample {member.rpartition('.')[0] or member} of {tars[tar]}"

    def image(i: int) -> bytes:
        tar, members = samples[i]
        if ext not in members:
            raise ValueError(f"it has no .{ext} member")
        return read_bytes(tars[tar], *members[ext][:2]).tobytes()

    split = str(Path(tars[0]).parent) if tars else ""
    return Listing(split, len(samples), shards_stamp([*tars, *indexes]), name, lambda i: image_problem(image, i))


def without(kwargs: dict, scan: Scan) -> dict:
    """The reader's arguments with copies of the indexes that list a bad sample, without its line."""
    text = lambda kept: "".join(line + "\n" for line in [f"{INDEX_VERSION} {len(kept)}", *kept])
    return index_without(kwargs, scan, "index_paths", lambda index: Path(index).read_text().splitlines()[1:], text)
