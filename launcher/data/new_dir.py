"""A data set's folder appears whole or not at all: built beside the target, renamed at the end.

A stop signal (Ctrl-C, SIGTERM) ends the build with its temporary folder removed and one line; one the
builder could not catch (SIGKILL) leaves the folder, which the next build of the same target removes
(its name holds the host and the pid that made it, so a live build is never taken for a dead one).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dali_launch.launcher.console import Interrupted
from dali_launch.launcher.route.machine_checks import check_target
from dali_launch.trainer.errors import UsageError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def check_free(to_dir: Path, flag: str) -> None:
    """The target may not exist yet, or be an empty folder; `flag` names it in the message."""
    if to_dir.exists() and (not to_dir.is_dir() or any(to_dir.iterdir())):
        raise UsageError(f"{flag} {to_dir} exists and is not empty; remove it or choose another directory")
    if any(parent.exists() and not parent.is_dir() for parent in to_dir.parents):
        raise UsageError(f"{flag} {to_dir} is under a file; choose another directory")
    check_target(to_dir, flag)


@contextmanager
def building(to_dir: Path) -> Iterator[Path]:
    """A temporary folder beside `to_dir`, renamed to it when the block ends; removed if it raises or a
    stop signal comes, so an interrupted run leaves nothing that looks like a complete data set."""
    to_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_builds(to_dir)
    tmp = Path(tempfile.mkdtemp(prefix=_prefix(to_dir, os.getpid()), dir=to_dir.parent))
    try:
        with _signals_raise():
            yield tmp
        if to_dir.exists():
            to_dir.rmdir()
        tmp.rename(to_dir)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, KeyboardInterrupt):  # the block stopped its workers first (synth.py)
            signum = getattr(e, "signum", signal.SIGINT)
            line = f"interrupted ({signal.Signals(signum).name}): {to_dir} not written, its partial files removed"
            raise Interrupted(signum, line) from None
        raise


def _prefix(to_dir: Path, pid: int) -> str:
    return f".{to_dir.name}.partial-{socket.gethostname()}-{pid}-"


def _remove_dead_builds(to_dir: Path) -> None:
    """The temporary folders of builds of `to_dir` on this host whose process is gone (SIGKILL)."""
    mine = f".{to_dir.name}.partial-{socket.gethostname()}-"
    for left in (p for p in to_dir.parent.iterdir() if p.name.startswith(mine)):  # no glob: names may hold [ or *
        pid = left.name[len(mine) :].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(left, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextmanager
def _signals_raise():
    """SIGTERM raises in the main thread, as Ctrl-C's SIGINT does, so the block's cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Interrupted(signum, "")

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
