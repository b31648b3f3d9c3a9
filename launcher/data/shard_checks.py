"""The checks of a sharded data set (--pipeline tfrecord, webdataset or segmentation) before any job starts.

DALI fails mid-epoch, with a C++ traceback, on a shard whose index is missing or does not match it,
and trains silently on a label out of range (a zero one-hot row). Every shard is read once here:
its framing (and CRCs), its index, its labels; a segmentation set's masks are decoded (their largest
class id, and that each is an 8-bit grey PNG of its image's size).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from dali_launch.launcher.data import tfrecord, webdataset
from dali_launch.trainer.data import formats
from dali_launch.trainer.data.records import tfrecord as tfrecord_source
from dali_launch.trainer.data.records import webdataset as webdataset_source
from dali_launch.trainer.errors import UsageError


def check_tfrecord(path: Path, origin: str, num_classes: int) -> None:
    """--pipeline tfrecord's data set (formats.py names this its check)."""
    check_shards(path, formats.get("tfrecord"), num_classes, _tfrecord_labels)


def check_webdataset(path: Path, origin: str, num_classes: int) -> None:
    """--pipeline webdataset's data set (formats.py names this its check)."""
    check_shards(path, formats.get("webdataset"), num_classes, _webdataset_labels)


def check_segmentation(path: Path, origin: str, num_classes: int) -> None:
    """--pipeline segmentation's data set (formats.py names this its check)."""
    check_shards(path, formats.get("segmentation"), num_classes, _mask_ids, "class id")


def check_shards(path: Path, found: formats.Format, num_classes: int, read, what: str = "label") -> None:
    """Every shard of both splits (`read(shard, index)`: its labels); a label out of range is named after
    all are read: the largest one, so one --num-classes fixes it (a 4-class set took two tries when the
    first bad label was named)."""
    fix = f"re-create the data set with `{found.make.format(path='OUT')}`"
    found_labels = []
    for split in ("training", "testing"):
        shards, indexes = formats.shard_files(path / split, found.suffix)
        if not shards:
            raise UsageError(f"{path / split} holds no *{found.suffix} shards for --pipeline {found.name}; {fix}")
        for shard, index in zip(map(Path, shards), map(Path, indexes)):
            if not index.is_file():
                raise UsageError(f"{shard} has no DALI index {index.name} beside it; {fix}")
            try:
                labels = read(shard, index)
            except ValueError as e:
                raise UsageError(f"{shard} is corrupt or does not match {index.name} ({e}); {fix}") from None
            found_labels += [(label, where, shard) for where, label in labels]
    _check_range(found_labels, num_classes, what)


def _tfrecord_labels(shard: Path, index: Path) -> list[tuple[str, int]]:
    """(which record, label) of every record, CRCs verified, the index checked against the records."""
    records = list(tfrecord.records(shard))
    ends = [offset for offset, _ in records[1:]] + [shard.stat().st_size]
    if tfrecord_source.read_index(index) != [(offset, end - offset) for (offset, _), end in zip(records, ends)]:
        raise ValueError("the index lists other records than the file holds")
    return [(f"record {n}", tfrecord_source.parse_example(payload)[1]) for n, (_, payload) in enumerate(records)]


def _webdataset_labels(shard: Path, index: Path) -> list[tuple[str, int]]:
    """(which sample, label) of every sample, the index checked against the tar's members."""
    samples = _tar_samples(shard, index, formats.WEBDATASET_EXT)
    out = []
    for name, jpg, cls in samples:
        if not jpg or not cls.strip().isdigit():
            raise ValueError(f"sample {name} lacks a .jpg or a .cls holding a class id")
        out.append((f"sample {name}", int(cls)))
    return out


def _mask_ids(shard: Path, index: Path) -> list[tuple[str, int]]:
    """(which sample's mask, its largest class id) of every sample, the index checked against the tar's members;
    a mask DALI would read other class ids from (a colour or palette PNG) or of another size than its image is
    refused in one line."""
    out = []
    for name, jpg, png in _tar_samples(shard, index, formats.SEGMENTATION_EXT):
        if not jpg or not png:
            raise ValueError(f"sample {name} lacks a .jpg or a .png mask")
        mask, problem = _mask(jpg, png)
        if problem:
            raise UsageError(
                f"the mask of sample {name} of {shard} is {problem}; a mask is an 8-bit grey PNG of class ids, "
                "its image's size"
            )
        out.append((f"the mask of sample {name}", int(max(mask.getextrema()))))
    return out


def _mask(jpg: bytes, png: bytes):
    """(the mask, opened, and what is wrong with it or ""); ValueError where either does not decode."""
    from PIL import Image

    try:
        mask, image = Image.open(io.BytesIO(png)), Image.open(io.BytesIO(jpg))
        mask.load()
    except Exception as e:  # Pillow raises many kinds: each one a file DALI cannot decode either
        raise ValueError(f"an image or mask does not decode ({e})") from None
    if mask.format != "PNG" or mask.mode != "L":
        return mask, f"a {mask.format} of mode {mask.mode}"
    if mask.size != image.size:
        return mask, f"{mask.size[0]}x{mask.size[1]} but its image {image.size[0]}x{image.size[1]}"
    return mask, ""


def _tar_samples(shard: Path, index: Path, ext: list[str]) -> list[tuple[str, bytes, bytes]]:
    """(name, image, second member) of every sample of a tar, its index checked against its members."""
    try:
        with tarfile.open(shard) as tar:
            members = [(m.name.partition(".")[2], m.offset_data, m.size, m.name) for m in tar if m.isfile()]
        samples = webdataset.read_samples(shard, ext)
    except tarfile.TarError as e:
        raise ValueError(f"not a readable tar: {e}") from None
    if [c for sample in webdataset_source.read_index(index) for c in sample] != members:
        raise ValueError("the index lists other members than the tar holds")
    return samples


def _check_range(labels: list[tuple[int, str, Path]], num_classes: int, what: str = "label") -> None:
    """(label, which sample, shard) of every sample: a negative label first, else the largest (its first)."""
    if not labels:
        return
    low = min(labels, key=lambda x: x[0])
    high = max(labels, key=lambda x: x[0])  # max keeps the first of equal labels
    if low[0] < 0:
        raise UsageError(
            f"--num-classes {num_classes} but {low[1]} of {low[2]} has label {low[0]}; labels are class ids from 0"
        )
    if high[0] >= num_classes:
        raise UsageError(
            f"--num-classes {num_classes} but {high[1]} of {high[2]} has {what} {high[0]}; "
            f"use --num-classes {high[0] + 1} or more"
        )
