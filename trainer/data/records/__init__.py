"""Random-access record sources: sample index -> (encoded bytes, class id or a mask's bytes), one module per format.

--sample-order global feeds DALI through `fn.external_source` from these, since DALI's native readers
read their own shard in their own order and cannot start at a position of a job-wide one. Each module
opens a source from its format's native reader's keyword arguments (`source(kwargs)`), so
`args.read("caffe2", path=...)` means the same records either way; a reader whose outputs are not
(encoded, class ids) has `native(outputs)` to make them so. Each also lists its split for the bad-sample
scan (`listing`) and leaves samples out of its reader (`without`). Which module a reader's is, and which
format a folder holds, is formats.py's: a new format is a record there and a module here.
"""

from __future__ import annotations

import json
from pathlib import Path

from dali_launch.trainer.data import formats
from dali_launch.trainer.data.global_order import fingerprint
from dali_launch.trainer.data.records import shared
from dali_launch.trainer.data.records.common import RecordSource

_OPENED: dict[str, RecordSource] = {}  # every pipeline of a process reads the same records: list them once


def readers() -> list[str]:
    """The native readers a source here stands in for."""
    return formats.readers()


def open_source(reader: str, kwargs: dict) -> RecordSource:
    """The source of the records DALI's `fn.readers.<reader>(**kwargs)` would read, opened once per process
    (a source lists its whole split: ImageNet's folders are 1.28 M files, per pipeline of every device),
    and in a job of several processes listed by process 0 alone (shared.py)."""
    found = formats.of_reader(reader)
    if found is None:
        raise KeyError(reader)
    key = source_key(reader, kwargs)
    if key not in _OPENED:
        _OPENED[key] = shared.opened(key, lambda: found.module().source(kwargs))
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


def native(reader: str, outputs, kwargs: dict | None = None):
    """`fn.readers.<reader>(**kwargs)`'s outputs as (encoded, class ids), as a source's read gives them (a
    second member that is no class, a mask, encoded)."""
    found = formats.of_reader(reader)
    convert = getattr(found.module(), "native", None) if found else None
    return convert(outputs, kwargs) if convert else outputs


def fingerprint_of(split: Path) -> dict | None:
    """The fingerprint of a split in a format known here, found by what the folder holds (the launcher's
    check of a resumed global order); None for a format it does not know or shards it cannot index."""
    found = formats.detect(split)
    quick = getattr(found.module(), "split_keys", None) if found else None
    if quick:  # an LMDB's keys alone, without opening a source
        return fingerprint(quick(found.reader_arguments(split)))
    source = source_of(split)
    return None if source is None else fingerprint(source.keys())


def source_of(split: Path) -> RecordSource | None:
    """The records of a split in a format known here, found by what the folder holds; None for a format
    it does not know or shards it cannot index."""
    found = formats.detect(split)
    if found is None:
        return None
    kwargs = found.reader_arguments(split)
    if found.suffix:  # shards: opened here, not shared (the launcher's check reads them once)
        try:
            return found.module().source(kwargs)
        except (OSError, ValueError, KeyError):  # a missing or broken index: the data checks say so
            return None
    return open_source(found.reader, kwargs)


__all__ = ["RecordSource", "fingerprint_of", "native", "native_arguments", "open_source", "readers", "source_of"]
