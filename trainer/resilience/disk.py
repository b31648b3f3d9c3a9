"""A write the file system refuses (full, over quota, read-only, no permission): one line naming where and
the fix, not Orbax's 530-character RESOURCE_EXHAUSTED and 123 lines of TensorStore. The previous
checkpoint is whole (Orbax deletes old ones only after a new one is complete), so the run resumes once
there is room."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths

REFUSED = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
WORDS = (
    "No space left on device",
    "Disk quota exceeded",
    "Read-only file system",
    "Permission denied",
    "Operation not permitted",  # an immutable file or folder (chattr +i), a root-squashed NFS export
)
# What to do about each: free space is no answer to a read-only file system (it was the only one given).
FIXES = {
    "No space left on device": "free space on that file system",
    "Disk quota exceeded": "raise your quota there (or free space in it)",
    "Read-only file system": "remount it read-write (or resume where it can be written)",
    "Permission denied": "make it writable for this user",
    "Operation not permitted": "make it writable (`lsattr -d` shows an immutable flag; `chattr -i` clears it)",
}


def refusal(error: BaseException) -> str | None:
    """The file system's reason if `error` is a refused write (an OSError, or TensorStore's text), else None."""
    if isinstance(error, OSError) and error.errno in REFUSED:
        return error.strerror
    text = str(error)
    return next((word for word in WORDS if word in text), None)


def _free_mb(path: Path) -> int:
    existing = next(p for p in (path, *path.parents) if p.exists())
    return shutil.disk_usage(existing).free >> 20


def _why(why: str, where: Path) -> str:
    """The reason, with the free space where it is the reason."""
    full = why in ("No space left on device", "Disk quota exceeded")
    return f"{why} ({_free_mb(where)} MB free there)" if full else why


def checkpoint_refused(paths: RunPaths, step: int, why: str, resume: str) -> UsageError:
    """The one line for checkpoint `step` that could not be written; its half-written folder removed."""
    saved.drop_unfinished(paths, step)
    newest = saved.newest(paths)
    kept = f"the newest checkpoint, step {newest.step}, is whole" if newest else "no checkpoint was written before it"
    return UsageError(
        f"cannot write checkpoint {step} into {paths.checkpoints}: {_why(why, paths.checkpoints)}; "
        f"{FIXES.get(why, 'make it writable')}, then {resume}: {kept}"
    )


def write_refused(paths: RunPaths, error: OSError, resume: str) -> UsageError:
    """The one line for any other write of the run that the file system refused."""
    where = error.filename or paths.root
    return UsageError(
        f"cannot write {where}: {_why(error.strerror, paths.root)} (the run root is {paths.root}); "
        f"{FIXES.get(error.strerror, 'make it writable')}, then {resume}"
    )
