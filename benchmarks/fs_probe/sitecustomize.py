"""benchmarks/scale.py's probe: counts one process's file-system operations under given roots, and times
the trainer's phases, for every process of a run (scale.py puts this folder on PYTHONPATH, so each
launcher, rank and DALI worker loads it when its interpreter starts; local mode and SLURM alike).

    DALI_LAUNCH_FS_PROBE        folder for the counts: one JSON file per process, written at exit
    DALI_LAUNCH_FS_PROBE_ROOTS  os.pathsep-separated roots: only operations on paths under them count

Counted: what Python's audit hooks see (open, os.listdir, os.scandir, os.mkdir, os.rename and
os.replace, os.remove, os.rmdir, os.utime, os.link, os.truncate) and os.stat and os.lstat, which raise
no audit event and are what pathlib's exists/is_dir/stat and os.path use, so they are wrapped. Not
seen: C++ code (DALI's readers, Orbax's tensorstore, XLA's cache), whose file work does not depend on
the number of ranks. Timed (absolute time.time()): the trainer's Startup.mark phases, each Loop.epoch
(with its device calls), each Checkpointer.write and each evaluation, by wrapping them as their modules
load. Without DALI_LAUNCH_FS_PROBE this file does nothing.
"""

from __future__ import annotations

import atexit
import importlib.abc
import json
import os
import sys
import time

OUT, ROOTS = os.environ.get("DALI_LAUNCH_FS_PROBE"), os.environ.get("DALI_LAUNCH_FS_PROBE_ROOTS", "")
EVENTS = ("open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.utime")
EVENTS += ("os.link", "os.truncate")
events: list = []  # (time, operation, path)
marks: list = []  # (what, start, end, detail)


def _path(value) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return value if isinstance(value, str) else None


def _note(operation: str, value) -> None:
    path = _path(value)
    if path is not None:
        path = os.path.abspath(path)
        if any(path == root or path.startswith(root + os.sep) for root in _roots):
            events.append((time.time(), operation, path))


def _audit(event: str, args) -> None:
    if event in EVENTS and args:
        _note(event, args[0])


def _counted(function, operation: str):
    def counting(path, *args, **kwargs):
        _note(operation, path)
        return function(path, *args, **kwargs)

    return counting


def _timed(cls, name: str, what: str, detail=lambda self, args, result: None) -> None:
    original = getattr(cls, name)

    def timing(self, *args, **kwargs):
        start = time.time()
        result = original(self, *args, **kwargs)
        marks.append((what, start, time.time(), detail(self, args, result)))
        return result

    setattr(cls, name, timing)


def _calls(self, args, result):
    """Loop.epoch(state, epoch, done, saved): the epoch and the device calls it made."""
    return {"epoch": args[1], "calls": self.data.steps - args[2]}


WRAPS = {
    "dali_launch.trainer.train": lambda m: _timed(m.Loop, "epoch", "epoch", _calls),
    # a checkpoint's write (an epoch's end hands its snapshot to `write`, maybe behind the next calls; `save` too)
    "dali_launch.trainer.resilience.checkpoint": lambda m: _timed(m.Checkpointer, "write", "save"),
    "dali_launch.trainer.step.evaluate": lambda m: _timed(m.Evaluator, "__call__", "evaluate"),
    "dali_launch.trainer.observe.startup": lambda m: _timed(m.Startup, "mark", "phase", lambda s, a, r: a[0]),
}


class _Wrapper(importlib.abc.MetaPathFinder):
    """Wraps the timed methods once their module has run."""

    def find_spec(self, name, path, target=None):
        if name not in WRAPS:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            WRAPS[name](module)

        spec.loader.exec_module = exec_module
        return spec


def _write() -> None:
    rank = os.environ.get("DALI_LAUNCH_PROCESS_ID") or os.environ.get("SLURM_PROCID")
    doc = {"pid": os.getpid(), "argv": sys.argv, "rank": rank, "events": events, "marks": marks}
    tmp = os.path.join(OUT, f".{os.getpid()}.tmp")
    with open(tmp, "w") as f:  # the probe's own folder is under no root: not counted
        json.dump(doc, f)
    os.replace(tmp, os.path.join(OUT, f"process-{os.getpid()}.json"))


if OUT:
    _roots = [os.path.abspath(r) for r in ROOTS.split(os.pathsep) if r]
    os.stat, os.lstat = _counted(os.stat, "os.stat"), _counted(os.lstat, "os.lstat")
    sys.addaudithook(_audit)
    sys.meta_path.insert(0, _Wrapper())
    atexit.register(_write)
