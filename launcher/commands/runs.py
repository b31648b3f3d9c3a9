"""`dali-launch runs [ROOT]`: every run directory under ROOT, one row each, from its files and its job.

The state is the run's job handle's (backends/job.py), the one vocabulary of `status` and `sweep status`:
pending, running, finished, interrupted (a signal stopped it after a checkpoint: --resume continues it),
cancelled, failed (a rank raised, a watchdog gave up, or it died without a word), not started.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

COLOURS = {
    "pending": "cyan",
    "running": "cyan",
    "finished": "green",
    "interrupted": "yellow",
    "cancelled": "yellow",
    "failed": "red",
    "not started": "white",
}


def runs(
    root: Annotated[str, typer.Argument(help="Folder holding the run directories.")] = "runs",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list of the rows instead of a table.")] = False,
):
    """Every run under ROOT: state (running, finished, failed, interrupted, ...), mode, topology, epochs, accuracy, speed."""
    rows = collect(Path(root))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    elif not rows:
        typer.echo(f"no runs under {Path(root).absolute()}")
    else:
        from rich.console import Console

        console = Console()
        # Piped or in a log, Rich would squeeze the table into 80 columns: give it the width it needs.
        (console if console.is_terminal else Console(width=250)).print(table(rows))


def collect(root: Path) -> list[dict]:
    """Rows of every run directory (a folder holding config.json) right under `root`, oldest first."""
    from dali_launch.trainer.run_dir import RunPaths

    found = sorted(p for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
    return [describe(RunPaths(p)) for p in found]


def describe(paths) -> dict:
    """One run's row: what it is, how far it got, how well and how fast."""
    from dali_launch.launcher.backends import registry
    from dali_launch.trainer.config import TaskSpec

    job, spec = registry.attach(paths), TaskSpec.load(paths.root)
    launch = json.loads(paths.launch.read_text()) if paths.launch.exists() else {}
    epochs = _metrics(paths)
    accuracies = [m["test_accuracy"] for m in epochs if m.get("test_accuracy") is not None]
    state = job.state()
    started = paths.launch.stat().st_mtime if paths.launch.exists() else paths.config.stat().st_mtime
    ended = time.time() if state.live else _last_write(paths)
    return {
        "run": paths.root.name,
        "path": str(paths.root),
        "state": str(state),
        "mode": spec.layout.backend,
        "nodes": _nodes(paths, launch.get("nodes", 1)),
        "processes": job.num_tasks,
        "devices_per_process": spec.layout.local_device_count,
        "epochs_done": len(epochs),
        "epochs": spec.train.epochs,
        "best_accuracy": max(accuracies, default=None),
        "last_accuracy": accuracies[-1] if accuracies else None,
        "images_per_s": epochs[-1]["images_per_s"] if epochs else None,
        "wall_time_s": max(0.0, ended - started),
    }


def _nodes(paths, given) -> int:
    """The nodes of the run's latest start: as given, or SLURM's pick from a --nodes range (rank_map.json)."""
    if str(given).isdigit():
        return int(given)
    try:
        return json.loads(paths.rank_map.read_text())[0]["num_nodes"]
    except (OSError, ValueError, LookupError):
        return int(str(given).partition("-")[0])


def _metrics(paths) -> list[dict]:
    if not paths.metrics.exists():
        return []
    return [json.loads(line) for line in paths.metrics.read_text().splitlines() if line.strip()]


def _last_write(paths) -> float:
    """When an ended run last wrote: its result, metrics, endings or heartbeats."""
    files = [paths.result, paths.metrics, paths.config, *paths.endings.glob("*"), *paths.heartbeats.glob("*")]
    return max(p.stat().st_mtime for p in files if p.exists())


def table(rows: list[dict]):
    from rich.table import Table

    out = Table("run", "state", "mode", "topology", "epochs", "best acc", "last acc", "images/s", "wall time")
    for r in rows:
        per = f" × {r['devices_per_process']} dev" if r["devices_per_process"] else ""
        out.add_row(
            r["run"],
            f"[{COLOURS[r['state']]}]{r['state']}[/]",
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
