"""Random-access record sources: sample index -> (encoded bytes, class id), one module per data format.

--sample-order global feeds DALI through `fn.external_source` from these, since DALI's native readers
read their own shard in their own order and cannot start at a position of a job-wide one. Each module
names the native reader it stands in for (`READER`) and opens a source from that reader's keyword
arguments (`source(kwargs)`), so `args.read("caffe2", path=...)` means the same records either way.
A new format is a module here with the same two names, added to FORMATS.
"""

from __future__ import annotations

from dali_launch.trainer.data.records import caffe2, folders
from dali_launch.trainer.data.records.common import RecordSource

FORMATS = {module.READER: module for module in (caffe2, folders)}


def open_source(reader: str, kwargs: dict) -> RecordSource:
    """The source of the records DALI's `fn.readers.<reader>(**kwargs)` would read."""
    if reader not in FORMATS:
        raise KeyError(reader)
    return FORMATS[reader].source(kwargs)


__all__ = ["FORMATS", "RecordSource", "open_source"]
