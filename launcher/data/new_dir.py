"""A data set's folder appears whole or not at all: built beside the target, renamed at the end."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dali_launch.launcher.route.machine_checks import check_target
from dali_launch.trainer.errors import UsageError


def check_free(to_dir: Path, flag: str) -> None:
    """The target may not exist yet, or be an empty folder; `flag` names it in the message."""
    if to_dir.exists() and (not to_dir.is_dir() or any(to_dir.iterdir())):
        raise UsageError(f"{flag} {to_dir} exists and is not empty; remove it or choose another directory")
    if any(parent.exists() and not parent.is_dir() for parent in to_dir.parents):
        raise UsageError(f"{flag} {to_dir} is under a file; choose another directory")
    check_target(to_dir, flag)


@contextmanager
def building(to_dir: Path) -> Iterator[Path]:
    """A temporary folder beside `to_dir`, renamed to it when the block ends; removed if it raises,
    so an interrupted run leaves nothing that looks like a complete data set."""
    to_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{to_dir.name}.", dir=to_dir.parent))
    try:
        yield tmp
        if to_dir.exists():
            to_dir.rmdir()
        tmp.rename(to_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
