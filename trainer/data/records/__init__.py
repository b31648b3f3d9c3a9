"""Random-access record sources: sample index -> (encoded bytes, class id), one module per data format.

--sample-order global feeds DALI through `fn.external_source` from these, since DALI's native readers
read their own shard in their own order and cannot start at a position of a job-wide one. Each module
names the native reader it stands in for (`READER`) and opens a source from that reader's keyword
arguments (`source(kwargs)`), so `args.read("caffe2", path=...)` means the same records either way.
A new format is a module here with the same two names, added to FORMATS.
"""

from __future__ import annotations

from pathlib import Path

from dali_launch.trainer.data.global_order import fingerprint
from dali_launch.trainer.data.records import caffe2, folders
from dali_launch.trainer.data.records.common import RecordSource

FORMATS = {module.READER: module for module in (caffe2, folders)}


def open_source(reader: str, kwargs: dict) -> RecordSource:
    """The source of the records DALI's `fn.readers.<reader>(**kwargs)` would read."""
    if reader not in FORMATS:
        raise KeyError(reader)
    return FORMATS[reader].source(kwargs)


def fingerprint_of(split: Path) -> dict | None:
    """The fingerprint of a split in a format known here, found by what the folder holds (the launcher's
    check of a resumed global order); None for a format it does not know."""
    if (split / "data.mdb").is_file():
        return fingerprint(caffe2.keys(str(split)))
    if split.is_dir() and any(p.is_dir() for p in split.iterdir()):
        return fingerprint(folders.source({"file_root": str(split)}).keys())
    return None


__all__ = ["FORMATS", "RecordSource", "fingerprint_of", "open_source"]
