"""Random-access record sources: sample index -> (encoded bytes, class id), one module per data format.

--sample-order global feeds DALI through `fn.external_source` from these, since DALI's native readers
read their own shard in their own order and cannot start at a position of a job-wide one. Each module
names the native reader it stands in for (`READER`) and opens a source from that reader's keyword
arguments (`source(kwargs)`), so `args.read("caffe2", path=...)` means the same records either way;
a reader whose outputs are not (encoded, class ids) has `native(outputs)` to make them so.
A new format is a module here with the same names, added to FORMATS.
"""

from __future__ import annotations

import json
from pathlib import Path

from dali_launch.trainer.data.global_order import fingerprint
from dali_launch.trainer.data.records import caffe2, folders, shared, tfrecord, webdataset
from dali_launch.trainer.data.records.common import RecordSource, shard_files

FORMATS = {module.READER: module for module in (caffe2, folders, tfrecord, webdataset)}
_OPENED: dict[str, RecordSource] = {}  # every pipeline of a process reads the same records: list them once


def open_source(reader: str, kwargs: dict) -> RecordSource:
    """The source of the records DALI's `fn.readers.<reader>(**kwargs)` would read, opened once per process
    (a source lists its whole split: ImageNet's folders are 1.28 M files, per pipeline of every device),
    and in a job of several processes listed by process 0 alone (shared.py)."""
    if reader not in FORMATS:
        raise KeyError(reader)
    key = source_key(reader, kwargs)
    if key not in _OPENED:
        _OPENED[key] = shared.opened(key, lambda: FORMATS[reader].source(kwargs))
    return _OPENED[key]


def source_key(reader: str, kwargs: dict) -> str:
    """What names a source, alike in every pipeline and process: the reader and its arguments of plain
    values (DALI's tfrecord features are objects that print their address; no source reads them)."""
    plain = (str, int, float, bool, list, tuple, type(None))
    return json.dumps([reader, {k: v for k, v in kwargs.items() if isinstance(v, plain)}], sort_keys=True)


def native_arguments(reader: str, kwargs: dict) -> dict:
    """`kwargs` for DALI's own `fn.readers.<reader>`: a file reader of a job of several processes reads
    process 0's listing of its folders instead of walking them (shared.py)."""
    if not shared.lists_folders(reader, kwargs):
        return kwargs
    if shared.lists_here():
        open_source(reader, kwargs)  # lists the folders once and writes the file list (shared.opened)
    return {**kwargs, "file_list": shared.file_list(source_key(reader, kwargs))}


def native(reader: str, outputs):
    """`fn.readers.<reader>`'s outputs as (encoded, class ids), as a source's read gives them."""
    convert = getattr(FORMATS.get(reader), "native", None)
    return convert(outputs) if convert else outputs


def fingerprint_of(split: Path) -> dict | None:
    """The fingerprint of a split in a format known here, found by what the folder holds (the launcher's
    check of a resumed global order); None for a format it does not know or shards it cannot index."""
    if (split / "data.mdb").is_file():  # the LMDB's keys alone, without opening a source
        return fingerprint(caffe2.keys(str(split)))
    source = source_of(split)
    return None if source is None else fingerprint(source.keys())


def source_of(split: Path) -> RecordSource | None:
    """The records of a split in a format known here, found by what the folder holds; None for a format
    it does not know or shards it cannot index."""
    if (split / "data.mdb").is_file():
        return open_source(caffe2.READER, {"path": str(split)})
    records, tars = shard_files(str(split), ".tfrecord"), shard_files(str(split), ".tar")
    try:
        if records[0]:
            return tfrecord.source({"path": records[0], "index_path": records[1]})
        if tars[0]:
            return webdataset.source({"paths": tars[0], "index_paths": tars[1], "ext": webdataset.EXT})
    except (OSError, ValueError, KeyError):  # a missing or broken index: the data checks say so
        return None
    if split.is_dir() and any(p.is_dir() for p in split.iterdir()):
        return open_source(folders.READER, {"file_root": str(split)})
    return None


__all__ = ["FORMATS", "RecordSource", "fingerprint_of", "native", "native_arguments", "open_source", "source_of"]
