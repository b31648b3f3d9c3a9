"""The machine a run starts from, checked before anything is written: its GPUs, and the folders a run
writes to (the run root, the per-user cache, `data synth`/`data prepare`'s target) writable and not full.

Each was a traceback from deep inside: JAX's (68 lines) for --platform gpu without a GPU, tempfile's
for a read-only target, Orbax's for a full disk. Here each is one line naming the folder and the fix.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dali_launch.launcher.run_config import RunConfig, counted
from dali_launch.trainer.cache import cache_root
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.topology import missing_gpu, resolve_platform, visible_gpus

MIN_FREE_MB = 16  # less than this on a folder's file system: full, for a run's logs and first checkpoint


def folder_problem(path: Path) -> str | None:
    """Why the folder `path` (or the one that would be made there) cannot be written, or None."""
    path = path.absolute()
    existing = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable for this user"
    free_mb = shutil.disk_usage(existing).free >> 20
    if free_mb < MIN_FREE_MB:
        return f"its file system has {free_mb} MB free"
    return None


def check_gpus(run: RunConfig) -> None:
    """A run here (`train`, --local) on GPUs needs this machine to have them."""
    wants = run.distributed.platform == "gpu" or run.data.decoder == "mixed"
    why = missing_gpu() if wants else None
    if why:
        flag = "--platform gpu" if run.distributed.platform == "gpu" else "--decoder mixed"
        fix = "use --platform cpu" if flag == "--platform gpu" else "use --decoder cpu"
        raise UsageError(f"{flag}, but {why}; run on a GPU machine, or {fix}")


def check_gpu_count(run: RunConfig) -> None:
    """`train` on GPUs: the GPUs it was planned for (run_config.with_devices; a resume's recorded count) are
    here. Else every start would stop in the task, after the run directory was written."""
    seen = visible_gpus()
    if resolve_platform(run.distributed.platform) == "gpu" and run.devices_per_node > seen:
        raise UsageError(
            f"--gpus-per-node {run.devices_per_node}, but this machine shows {counted(seen, 'GPU')} "
            f"(CUDA_VISIBLE_DEVICES, /dev/nvidia*); use --gpus-per-node {seen} (a resume goes on elastically)"
        )


def check_cache(run: RunConfig) -> None:
    """The per-user cache (the embedded data set, XLA's programs, codec links, sample checks) and an
    explicit --compile-cache folder: writable, not full."""
    root = cache_root()
    why = folder_problem(root)
    if why:
        where = "$DALI_LAUNCH_CACHE" if os.environ.get("DALI_LAUNCH_CACHE") else "~/.cache/dali-launch"
        raise UsageError(
            f"cannot write in the cache folder {root.absolute()} ({where}): {why}; point DALI_LAUNCH_CACHE "
            f"at a writable folder with space"
        )
    folder = run.xla.compile_cache
    if folder not in ("", "off") and (why := folder_problem(Path(folder))):
        raise UsageError(f"cannot write in --compile-cache {Path(folder).absolute()}: {why}; choose another, or off")


def check_target(path: Path, flag: str) -> None:
    """`data synth`'s OUT, `data prepare`'s --to: the folder that will be made there can be written."""
    why = folder_problem(path)
    if why:
        raise UsageError(f"cannot write {flag} {path}: {why}; choose another directory")
