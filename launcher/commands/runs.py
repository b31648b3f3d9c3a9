"""`dali-launch runs [ROOT]`: every run directory under ROOT, one row each, from its files and its job;
every sweep under ROOT, one row, followed by its points.

The state is the run's job handle's (backends/job.py), the one vocabulary of `status` and `sweep status`:
pending, running, finished, interrupted (a signal stopped it after a checkpoint: --resume continues it),
cancelled, failed (a rank raised, a watchdog gave up, or it died without a word), not started; a failed
or interrupted run's row says why (its ranks' endings: backends/job.why_ended).
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Annotated

import typer

WHY_WIDTH = 70  # of the table's why column; --json has it whole
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
    """Rows of every run directory (a folder holding config.json) right under `root`, oldest first, and of
    every sweep there (a folder holding sweep.json): its own row, then one per point (kind "point")."""
    from dali_launch.trainer.run_dir import RunPaths

    folders = sorted(root.iterdir()) if root.is_dir() else []
    rows = []
    for folder in folders:
        if (folder / "config.json").is_file():
            rows.append(describe(RunPaths(folder)))
        elif (folder / "sweep.json").is_file():
            rows += sweep_rows(folder)
    return rows


def sweep_rows(folder: Path) -> list[dict]:
    """A sweep's row (its points' states counted) and its points' rows, named SWEEP/POINT."""
    from dali_launch.launcher.route import sweep
    from dali_launch.trainer.run_dir import RunPaths

    record = sweep.load(folder)
    points = [
        {**describe(RunPaths(p["run_dir"])), "kind": "point", "run": f"{folder.name}/{Path(p['run_dir']).name}"}
        for p in record["points"]
        if (Path(p["run_dir"]) / "config.json").is_file()
    ]
    states = collections.Counter(p["state"] for p in points)
    return [
        {
            "kind": "sweep",
            "run": folder.name,
            "path": str(folder),
            "state": ", ".join(f"{n} {s}" for s, n in sorted(states.items())),
            "points": len(record["points"]),
            "axes": record["axes"],
        },
        *points,
    ]


def describe(paths) -> dict:
    """One run's row: what it is, how far it got, how well and how fast."""
    from dali_launch.launcher.backends import registry
    from dali_launch.launcher.backends.job import why_ended
    from dali_launch.trainer.config import TaskSpec

    job, spec = registry.attach(paths), TaskSpec.load(paths.root)
    launch = json.loads(paths.launch.read_text()) if paths.launch.exists() else {}
    epochs = _metrics(paths)
    accuracies = [m["test_accuracy"] for m in epochs if m.get("test_accuracy") is not None]
    state = job.state()
    started = paths.launch.stat().st_mtime if paths.launch.exists() else paths.config.stat().st_mtime
    ended = time.time() if state.live else _last_write(paths)
    return {
        "kind": "run",
        "run": paths.root.name,
        "path": str(paths.root),
        "state": str(state),
        "why": why_ended(paths, state),
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
    from rich.markup import escape
    from rich.table import Table

    out = Table("run", "state", "mode", "topology", "epochs", "best acc", "last acc", "images/s", "wall time", "why")
    for r in rows:
        if r["kind"] == "sweep":
            axes = " ".join(f"{k.replace('_', '-')}={','.join(map(str, v))}" for k, v in r["axes"].items())
            out.add_row(f"{r['run']}/ (sweep, {r['points']} points)", r["state"], "", axes)
            continue
        per = f" × {r['devices_per_process']} dev" if r["devices_per_process"] else ""
        out.add_row(
            f"  {r['run'].split('/')[-1]}" if r["kind"] == "point" else r["run"],
            f"[{COLOURS[r['state']]}]{r['state']}[/]",
            r["mode"],
            f"{r['nodes']} node × {r['processes'] // r['nodes']} proc{per}",
            f"{r['epochs_done']}/{r['epochs']}",
            _num(r["best_accuracy"], ".4f"),
            _num(r["last_accuracy"], ".4f"),
            _num(r["images_per_s"], ",.0f"),
            _duration(r["wall_time_s"]),
            escape(r["why"][:WHY_WIDTH] + ("…" if len(r["why"]) > WHY_WIDTH else "")),
        )
    return out


def _num(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}:{m:02d}:{s:02d}" if hours else f"{m}:{s:02d}"
