"""A run's directory, from the launcher's side: created once and complete (or not at all), and rewritten
when a --resume changes what the run may change. The files it writes are the run's configuration
(config.json, config.toml, launch.json) and what the Python API sent by value (objects/: sent_objects.py); the
job record (job.json) is the backend's (backends/job.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path

from dali_launch.launcher import config_file
from dali_launch.launcher.route import sent_objects
from dali_launch.launcher.route.machine_checks import MIN_FREE_MB
from dali_launch.launcher.run_config import RunConfig, task_spec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, write_atomic


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "run"


STAMP = r"-(\d{8})-(\d{6})(?:-(\d+))?"  # what `create` adds to --name: -YYYYmmdd-HHMMSS, then -n for a second alike


def named(root: Path, name: str) -> list[Path]:
    """The run directories `--name NAME` made under `root` (a sweep's points among them), oldest first."""
    stamped = re.compile(re.escape(slug(name)) + STAMP + "$")
    folders = [*root.glob("*"), *(p for sweep in root.glob("*/sweep.json") for p in sweep.parent.iterdir())]
    found = {f: stamped.match(f.name) for f in folders if stamped.match(f.name) and (f / "config.json").is_file()}
    return sorted(found, key=lambda f: (found[f].group(1), found[f].group(2), int(found[f].group(3) or 0)))


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
    free_mb = shutil.disk_usage(existing).free >> 20
    if free_mb < MIN_FREE_MB:
        raise UsageError(
            f"--run-root {root} is on a full file system ({free_mb} MB free); free space there, or choose "
            f"another --run-root"
        )


def create(run: RunConfig, data_dir: Path, backend: str, name: str | None = None) -> RunPaths:
    """RUN_ROOT/NAME-YYYYmmdd-HHMMSS[-n] with config.json (the task spec), config.toml, launch.json and objects/.

    `name`: exactly RUN_ROOT/name instead, which must not exist yet (a job step's run directory,
    backends/allocation.py, that every task of the step names alike)."""
    root = Path(run.launch.run_root).absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create --run-root {root} ({e.strerror}); choose a writable folder") from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    names = [name] if name else [f"{slug(run.launch.name)}-{stamp}{f'-{n}' if n else ''}" for n in range(100)]
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
        sent_objects.write(run, paths)
        paths.logs.mkdir()
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # nothing half-written stays behind
        raise
    return paths


def resume(run: RunConfig, data_dir: Path, backend: str, changed: bool) -> RunPaths:
    """--resume RUN_DIR (route/resume.py made `run` from it): the run directory, its spec rewritten when
    this resumption changes some of it (more epochs, other timeouts), its earlier cancel and requeues forgotten
    (`status` says those of the job it runs as now)."""
    paths = RunPaths(Path(run.launch.resume))
    if changed:
        write_atomic(paths.config, task_spec(run, str(paths.root), str(data_dir), backend).to_json())
        write_atomic(
            paths.config_toml,
            config_file.dumps(
                dataclasses.replace(run, launch=dataclasses.replace(run.launch, resume=None, dry_run=False))
            ),
        )
    paths.cancel.unlink(missing_ok=True)
    paths.requeues.unlink(missing_ok=True)
    return paths
