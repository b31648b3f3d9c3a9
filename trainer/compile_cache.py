"""XLA's persistent compilation cache, on by default: a run's programs kept for its requeues and resumes
and for every later run of its run root, so a warm start compiles nothing.

JAX writes an entry with one plain write, not atomically, and from process 0 of a job alone; two jobs
writing the same program at once (the points of a sweep) could leave a torn file that every later run
fails to read and compiles again. So a run compiles into a folder of its own, RUN_DIR/compile-cache
(one writer, its process 0; every rank of the job reads it), and shares through RUN_ROOT/.compile-cache
(or --compile-cache DIR), which only ever holds complete files: at start-up every rank links each shared
entry it lacks into the run's folder (a hard link: no copy, and never half a file), and process 0
publishes the run's new entries at each epoch's end and at the task's end, each copied under a
temporary name and renamed into place. A concurrent publisher's rename replaces a complete file with
another complete one.

On GPUs XLA times candidate kernels (autotuning) at each compile, and two compiles of one program can pick
differently. Its picks are kept in SHARED/autotune (XLA's per-fusion autotuning cache, written by XLA file
by file): every later compile of the run root's runs, a program the persistent cache lacks or a requeue's,
picks as the first did, without timing anything again (a ResNet-50 run kept 348 picks on an H200).

JAX writes entries from process 0 alone, but another process's keys can differ from process 0's for the same
program: on CPUs each process hashes the job's topology as it sees it, and a program on one process's own
devices (the model's init) names other devices on each. Such a process found nothing and compiled everything
at every start (a 2-process run's rank 1: 9 s of compiles on the 2-core machine, warm). So every other process
writes its own entries too (`every_process_writes`), each under a temporary name renamed into place, at the
end of an epoch and as the task ends, however it ends (a stop, a requeue, an error: its resumption starts
warm), and only where process 0 has not written the same key.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from dali_launch.trainer import jax_private
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.run_dir import RunPaths, write_atomic

SHARED = ".compile-cache"  # in the run root: hidden, and no run directory (`dali-launch runs` skips it)
ENV = "DALI_LAUNCH_COMPILE_CACHE"  # the default folder instead of the run root's
MIN_COMPILE_S = 0.2  # JAX's default (1 s) would leave the MLP's steps out on a GPU
MIN_COMPILE_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"  # JAX's own setting: where given, it wins
AUTOTUNE = "autotune"  # in the shared folder: XLA's autotuning picks, one file per fused kernel
AUTOTUNE_FLAG = "xla_gpu_per_fusion_autotune_cache_dir"
ENTRY_SUFFIX = "-cache"  # JAX's file cache: KEY-cache
JAX_WRITER_PARAMETERS = ["cache_key", "compile_time_secs", "module_name", "backend", "executable"]
_PENDING: list = []  # (entry, compile time, backend, executable) kept by every_process_writes' hook
SETTLED_S = 2.0  # an entry this recent may still be being written (a compile in a thread): published later


def shared_folder(spec: TaskSpec) -> Path | None:
    """Where the runs of a run root share their programs: --compile-cache DIR, else $DALI_LAUNCH_COMPILE_CACHE
    (the test suite's: one folder for all its run roots), else RUN_ROOT/.compile-cache; None for off."""
    setting = spec.xla.compile_cache or os.environ.get(ENV, "")
    if setting == "off":
        return None
    return Path(setting) if setting else Path(spec.run_dir).absolute().parent / SHARED


def autotune_folder(spec: TaskSpec) -> Path | None:
    """Where XLA keeps its autotuning picks for the runs of a run root (the shared folder's `autotune/`); None
    with --compile-cache off. One path for every run of the root: the path is part of each program's cache key."""
    shared = shared_folder(spec)
    return None if shared is None else shared.absolute() / AUTOTUNE


def use(spec: TaskSpec) -> Path | None:
    """JAX's cache pointed at the run's own folder, filled with links to the shared entries; its path, or None."""
    shared = shared_folder(spec)
    if shared is None:
        return None
    mine = RunPaths(spec.run_dir).compile_cache
    link_all(shared, mine)
    point_jax_at(mine)
    if f"--{AUTOTUNE_FLAG}=" in os.environ.get("XLA_FLAGS", ""):  # placement.py asked XLA to keep its picks there
        autotune_folder(spec).mkdir(parents=True, exist_ok=True)
    return mine


def point_jax_at(folder: Path) -> None:
    """JAX's persistent cache in `folder`, its entries' keys independent of the folder's path."""
    import jax

    jax.config.update("jax_compilation_cache_dir", str(folder))
    if MIN_COMPILE_ENV not in os.environ:  # JAX read it at import
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_S)
    # JAX would also point XLA's autotuning cache into this folder, and that path is part of every entry's
    # key: each run's keys would differ and no run would find another's programs. The run root's one
    # autotuning folder is set with XLA's flags instead (autotune_folder, placement.py).
    with contextlib.suppress(AttributeError):
        jax.config.update("jax_persistent_cache_enable_xla_caches", "none")


def every_process_writes(folder: Path | None, process_index: int) -> None:
    """On a process other than 0 (`process_index`: this one's), the programs it compiles are kept (JAX's writer skips them) and written to
    `folder` (the run's) by `write_pending`. Where JAX's internals are not as expected, JAX is left as it is:
    its writer's first parameters are checked by name (JAX 0.10 passes `host_callbacks` after them, 0.11 not)."""
    import inspect

    try:
        compiler = jax_private.compiler()
        parameters, min_compile_s = (
            list(inspect.signature(compiler._cache_write).parameters),
            jax_private.min_compile_time_s(),
        )
    except (ImportError, AttributeError, TypeError, ValueError):
        return
    if folder is None or process_index == 0 or parameters[:5] != JAX_WRITER_PARAMETERS:
        return

    def keep(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks=()) -> None:
        if not host_callbacks and compile_time_secs >= min_compile_s:
            _PENDING.append((folder / f"{cache_key}{ENTRY_SUFFIX}", int(compile_time_secs), backend, executable))

    compiler._cache_write = keep


def write_pending() -> int:
    """The programs this process kept since the last call, each written whole where no file has its key:
    before the epoch's last barrier, so process 0 publishes them after it. Written only then, when process 0's
    entries are on disk: on GPUs, where every process may hash a program alike, N processes do not each write
    what process 0 wrote. Returns how many were written."""
    if not _PENDING:  # process 0, or JAX's internals not as expected
        return 0
    compilation_cache = jax_private.compilation_cache()

    written = 0
    while _PENDING:
        target, compile_time_s, backend, executable = _PENDING.pop()
        if target.exists():
            continue
        with contextlib.suppress(Exception):  # an entry not written: the next run compiles the program again
            serialized = (
                executable.serialize() if hasattr(executable, "serialize") else backend.serialize_executable(executable)
            )
            entry = compilation_cache.combine_executable_and_time(serialized, compile_time_s)
            write_atomic(target, compilation_cache.compress_executable(entry))
            written += 1
    return written


def link_all(shared: Path, mine: Path) -> None:
    """Every entry of `shared` in `mine` too, whole (a link, or a copy renamed into place)."""
    mine.mkdir(parents=True, exist_ok=True)
    for entry in _entries(shared):
        _link(entry, mine / entry.name)


def publish(spec: TaskSpec, process_index: int, settled_s: float = SETTLED_S) -> int:
    """The run's entries the shared folder lacks, put there whole, by process 0 (the one JAX writes from;
    `process_index`: this one). Returns how many."""
    shared = shared_folder(spec)
    if shared is None or process_index != 0:
        return 0
    return publish_new(RunPaths(spec.run_dir).compile_cache, shared, settled_s)


def publish_new(mine: Path, shared: Path, settled_s: float = SETTLED_S) -> int:
    """The entries of `mine` that `shared` lacks, each copied under a temporary name and renamed there."""
    if not mine.is_dir():
        return 0
    shared.mkdir(parents=True, exist_ok=True)
    have, now, published = {e.name for e in _entries(shared)}, time.time(), 0
    for entry in _entries(mine):
        if entry.name in have or now - entry.stat().st_mtime < settled_s:
            continue
        _copy_whole(entry, shared / entry.name)
        published += 1
    return published


def _entries(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir() if not p.name.startswith(".") and p.is_file()]


def _link(source: Path, target: Path) -> None:
    """`target` is `source`, whole: a hard link, or a copy renamed into place where links cannot be made."""
    try:
        os.link(source, target)
    except FileExistsError:
        pass
    except OSError:  # another file system (a --compile-cache elsewhere), or one without links
        _copy_whole(source, target)


def _copy_whole(source: Path, target: Path) -> None:
    """`source` copied to a temporary file of its own beside `target`, then renamed to it: readers see the old
    file or the new one, whole; a publisher at the same time renames a whole file of its own."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as into:
            shutil.copyfileobj(into, out)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
