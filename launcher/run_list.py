"""`dali-launch runs [ROOT]`: every run directory under ROOT, one row each, from its files alone.

finished     result.json is there
running      a launcher or process 0 holds the run's lock (local, `train`), or its SLURM job is queued
interrupted  a rank recorded that a signal stopped it after a checkpoint (endings/): --resume continues it
failed       it ended any other way: a rank raised, a watchdog gave up, or it died without a word
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from dali_launch.launcher.backends.follow import started_tasks
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.resilience import ending
from dali_launch.trainer.run_dir import RunPaths, is_locked


def state(paths: RunPaths) -> str:
    if paths.result.exists():
        return "finished"
    if any(is_locked(paths.lock(holder)) for holder in ("launcher", "task")) or _queued(paths):
        return "running"
    hows = {e["how"] for e in ending.read(paths)}
    return "interrupted" if hows == {ending.STOPPED} else "failed"


def _queued(paths: RunPaths) -> bool:
    """A SLURM job still in the queue (pending, running, requeued): its task's lock may be on another host."""
    job = paths.root / "job.json"
    if not job.is_file() or shutil.which("squeue") is None:
        return False
    from dali_launch.launcher.backends.follow import queue_state

    return queue_state(str(json.loads(job.read_text())["job_id"])) is not None


def _nodes(paths: RunPaths, given) -> int:
    """The nodes of the run's latest start: as given, or SLURM's pick from a --nodes range (rank_map.json)."""
    if str(given).isdigit():
        return int(given)
    try:
        return json.loads(paths.rank_map.read_text())[0]["num_nodes"]
    except (OSError, ValueError, LookupError):
        return int(str(given).partition("-")[0])


def describe(paths: RunPaths) -> dict:
    """One run's row: what it is, how far it got, how well and how fast."""
    spec = TaskSpec.load(paths.root)  # an older run directory is read as today's
    launch = json.loads(paths.launch.read_text()) if paths.launch.exists() else {}
    epochs = _metrics(paths)
    accuracies = [m["test_accuracy"] for m in epochs if m.get("test_accuracy") is not None]
    run_state = state(paths)
    started = paths.launch.stat().st_mtime if paths.launch.exists() else paths.config.stat().st_mtime
    ended = time.time() if run_state == "running" else _last_write(paths)
    return {
        "run": paths.root.name,
        "path": str(paths.root),
        "state": run_state,
        "mode": spec.layout.backend,
        "nodes": _nodes(paths, launch.get("nodes", 1)),
        "processes": started_tasks(paths, spec.layout.num_processes),
        "devices_per_process": spec.layout.local_device_count,
        "epochs_done": len(epochs),
        "epochs": spec.train.epochs,
        "best_accuracy": max(accuracies, default=None),
        "last_accuracy": accuracies[-1] if accuracies else None,
        "images_per_s": epochs[-1]["images_per_s"] if epochs else None,
        "wall_time_s": max(0.0, ended - started),
    }


def _metrics(paths: RunPaths) -> list[dict]:
    if not paths.metrics.exists():
        return []
    return [json.loads(line) for line in paths.metrics.read_text().splitlines() if line.strip()]


def _last_write(paths: RunPaths) -> float:
    """When an ended run last wrote: its result, metrics, endings or heartbeats."""
    files = [paths.result, paths.metrics, paths.config, *paths.endings.glob("*"), *paths.heartbeats.glob("*")]
    return max(p.stat().st_mtime for p in files if p.exists())


def collect(root: Path) -> list[dict]:
    """Rows of every run directory (a folder holding config.json) right under `root`, oldest first."""
    found = sorted(p for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
    return [describe(RunPaths(p)) for p in found]


def table(rows: list[dict]):
    from rich.table import Table

    out = Table("run", "state", "mode", "topology", "epochs", "best acc", "last acc", "images/s", "wall time")
    colour = {"finished": "green", "running": "cyan", "interrupted": "yellow", "failed": "red"}
    for r in rows:
        per = f" × {r['devices_per_process']} dev" if r["devices_per_process"] else ""
        out.add_row(
            r["run"],
            f"[{colour[r['state']]}]{r['state']}[/]",
            r["mode"],
            f"{r['nodes']} node × {r['processes'] // r['nodes']} proc{per}",
            f"{r['epochs_done']}/{r['epochs']}",
            _num(r["best_accuracy"], ".4f"),
            _num(r["last_accuracy"], ".4f"),
            _num(r["images_per_s"], ",.0f"),
            _duration(r["wall_time_s"]),
        )
    return out


def _num(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}:{m:02d}:{s:02d}" if hours else f"{m}:{s:02d}"
