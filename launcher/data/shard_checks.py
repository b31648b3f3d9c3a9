"""The checks of a sharded data set (--pipeline tfrecord or webdataset) before any job starts.

DALI fails mid-epoch, with a C++ traceback, on a shard whose index is missing or does not match it,
and trains silently on a label out of range (a zero one-hot row). Every shard is read once here:
its framing (and CRCs), its index, its labels.
"""

from __future__ import annotations

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


def check_shards(path: Path, found: formats.Format, num_classes: int, read) -> None:
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
    _check_range(found_labels, num_classes)


def _tfrecord_labels(shard: Path, index: Path) -> list[tuple[str, int]]:
    """(which record, label) of every record, CRCs verified, the index checked against the records."""
    records = list(tfrecord.records(shard))
    ends = [offset for offset, _ in records[1:]] + [shard.stat().st_size]
    if tfrecord_source.read_index(index) != [(offset, end - offset) for (offset, _), end in zip(records, ends)]:
        raise ValueError("the index lists other records than the file holds")
    return [(f"record {n}", tfrecord_source.parse_example(payload)[1]) for n, (_, payload) in enumerate(records)]


def _webdataset_labels(shard: Path, index: Path) -> list[tuple[str, int]]:
    """(which sample, label) of every sample, the index checked against the tar's members."""
    try:
        with tarfile.open(shard) as tar:
            members = [(m.name.partition(".")[2], m.offset_data, m.size, m.name) for m in tar if m.isfile()]
        samples = webdataset.read_samples(shard)
    except tarfile.TarError as e:
        raise ValueError(f"not a readable tar: {e}") from None
    if [c for sample in webdataset_source.read_index(index) for c in sample] != members:
        raise ValueError("the index lists other members than the tar holds")
    out = []
    for name, jpg, cls in samples:
        if not jpg or not cls.strip().isdigit():
            raise ValueError(f"sample {name} lacks a .jpg or a .cls holding a class id")
        out.append((f"sample {name}", int(cls)))
    return out


def _check_range(labels: list[tuple[int, str, Path]], num_classes: int) -> None:
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
            f"--num-classes {num_classes} but {high[1]} of {high[2]} has label {high[0]}; "
            f"use --num-classes {high[0] + 1} or more"
        )
