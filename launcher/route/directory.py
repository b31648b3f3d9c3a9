"""Creating a run directory: once, complete, or not at all."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path

from dali_launch.launcher import config_file
from dali_launch.launcher.config import RunConfig, task_spec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, is_locked, write_atomic


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "run"


def check_root(run_root: str) -> None:
    """--run-root, checked without writing: a writable folder, or one that can be made (dry runs see it too)."""
    root = Path(run_root).absolute()
    existing = next(p for p in (root, *root.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        raise UsageError(f"cannot create --run-root {root}: {existing} is not a folder; choose another --run-root")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write in --run-root {root}: {existing} is not writable for this user; choose a writable folder"
        )


def create(run: RunConfig, data_dir: Path, backend: str, name: str | None = None) -> RunPaths:
    """RUN_ROOT/NAME-YYYYmmdd-HHMMSS[-n] with config.json (the task spec), config.toml and launch.json.

    `name`: exactly RUN_ROOT/name instead, which must not exist yet (a job step's run directory,
    backends/allocation.py, that every task of the step names alike)."""
    root = Path(run.launch.run_root).absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create --run-root {root} ({e.strerror}); choose a writable folder") from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    names = [name] if name else [f"{_slug(run.launch.name)}-{stamp}{f'-{n}' if n else ''}" for n in range(100)]
    for candidate in names:
        path = root / candidate
        try:
            path.mkdir()
            break
        except FileExistsError:
            if name:
                raise UsageError(f"run directory {path} exists already; choose another --name or --run-root") from None
            continue
        except OSError as e:
            raise UsageError(f"cannot write in --run-root {root} ({e.strerror}); choose a writable folder") from None
    paths = RunPaths(path)
    try:
        write_atomic(paths.config, task_spec(run, str(path), str(data_dir), backend).to_json())
        resolved = dataclasses.replace(run, data=dataclasses.replace(run.data, data_dir=str(data_dir)))
        write_atomic(paths.config_toml, config_file.dumps(resolved))
        write_atomic(paths.launch, json.dumps(dataclasses.asdict(run.launch), indent=2))
        paths.logs.mkdir()
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # nothing half-written stays behind
        raise
    return paths


def reopen(run: RunConfig, data_dir: Path, backend: str, changed: bool) -> RunPaths:
    """--resume RUN_DIR (launcher/resume.py made `run` from it): the run directory, its spec rewritten
    when this resumption changes some of it (more epochs, other timeouts)."""
    paths = RunPaths(Path(run.launch.resume))
    if changed:
        write_atomic(paths.config, task_spec(run, str(paths.root), str(data_dir), backend).to_json())
        write_atomic(
            paths.config_toml,
            config_file.dumps(
                dataclasses.replace(run, launch=dataclasses.replace(run.launch, resume=None, dry_run=False))
            ),
        )
    return paths


def check_not_live(paths: RunPaths) -> None:
    """A run directory a job still runs in is refused: a launcher or a task holds its lock (released
    by the kernel when they die), or its SLURM job is still queued (locks may not cross NFS hosts)."""
    holder = next((h for h in ("launcher", "task") if is_locked(paths.lock(h))), None)
    if holder:
        raise UsageError(
            f"--resume {paths.root}: a job is still running in it (its {holder} holds "
            f"{paths.lock(holder).name}); wait for it to end, or stop it first"
        )
    job = paths.root / "job.json"
    if job.is_file():
        from dali_launch.launcher.backends.follow import queue_state

        job_id = json.loads(job.read_text())["job_id"]
        state = queue_state(job_id) if shutil.which("squeue") else None
        if state is not None:
            raise UsageError(
                f"--resume {paths.root}: its SLURM job {job_id} is still {state}; wait for it to end, "
                f"or `dali-launch cancel {job_id}` first"
            )
