"""A split's records listed once per job: process 0 lists them, every other process reads its listing.

Under --sample-order global every process opens a record source of the whole split (ImageNet's class
folders: 1,000 folders and 1.28 M names; a TFRecord set: every index file), and DALI's file reader
walks the class folders once per pipeline. On a shared file system that is N times one listing's
metadata work. Once a job of several processes has `join`ed (set_up.py), process 0 opens each source,
writes it to RUN_DIR/listings/ (a pickle; for class folders also the DALI file list that readers then
take instead of walking the folders) and publishes its name through the coordination service; the
others wait for that (bounded) and read one file: the pickle (a global order's source) or, for DALI's
file readers, only the file list. So: process 0 lists a split once (O(split) file operations), every
other rank opens one file per split (O(1)), and reads O(split) bytes from it.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Callable
from pathlib import Path

from dali_launch.trainer import coordination
from dali_launch.trainer.run_dir import RunPaths, write_atomic

_JOB: dict = {}  # run_dir, process_id, num_processes, timeout_s: the job this process is part of
FILE_READER = "file"
WALKED = {"file_root", "name", "file_filters"}  # a file reader given only these walks its folders (DALI's file_root)


def join(run_dir: str, process_id: int, num_processes: int, timeout_s: int) -> None:
    """From now on, sources are listed once for the job (a single process lists its own)."""
    _JOB.update(run_dir=run_dir, process_id=process_id, num_processes=num_processes, timeout_s=timeout_s)


def opened(key: str, open_here: Callable):
    """The source `open_here()` opens (`key`: records.source_key), opened by process 0 alone when the job
    has several processes."""
    if _JOB.get("num_processes", 1) == 1:
        return open_here()
    path = _listing(key)
    if _JOB["process_id"] == 0:
        source = open_here()
        write_atomic(path, pickle.dumps(source))
        if hasattr(source, "file_list"):
            write_atomic(path.with_suffix(".txt"), source.file_list())
        coordination.publish(f"listing/{path.stem}", path.name)
        return source
    coordination.wait_for(f"listing/{path.stem}", _JOB["timeout_s"], _JOB["process_id"])
    return pickle.loads(path.read_bytes())


def lists_folders(reader: str, kwargs: dict) -> bool:
    """Whether a native reader with `kwargs` would walk class folders that process 0 lists instead."""
    return reader == FILE_READER and _JOB.get("num_processes", 1) > 1 and set(kwargs) <= WALKED


def lists_here() -> bool:
    """Whether this process is the one that lists (process 0; or a process alone)."""
    return _JOB.get("process_id", 0) == 0


def file_list(key: str) -> str:
    """The DALI file list beside process 0's listing of the source `key`: process 0 opened the source
    first; another process waits for its listing, without reading the listing's pickle."""
    path = _listing(key)
    if not lists_here():
        coordination.wait_for(f"listing/{path.stem}", _JOB["timeout_s"], _JOB["process_id"])
    return str(path.with_suffix(".txt"))


def _listing(key: str) -> Path:
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return RunPaths(_JOB["run_dir"]).listing(f"{json.loads(key)[0]}-{digest}.pkl")
