"""Sweeps: `--sweep KEY=V1,V2,...` (repeatable) runs the grid of all values, each point a complete run.

    dali-launch --nodes 2 --gpus-per-node 8 --sweep learning-rate=0.05,0.1 --sweep batch-size=32,64 --max-parallel 2
    dali-launch sweep status runs/dali-launch-sweep-20261130-120000 [--json]

A sweep is a list of runs on the one route (route/launch.py): checked alike, their directories made in
the sweep directory before anything starts; on SLURM ONE job array (submitit's map_array; --max-parallel
is the array's %N), each element a multi-node job of its own; with --local one run after another. This
module makes the runs from the grid and keeps the sweep's own record (sweep.json: the axes, each point's
values and run directory, the array's job id); the run directories keep the rest.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from dali_launch.launcher.backends.base import Outcome, Watch
from dali_launch.launcher.console import echo, error
from dali_launch.launcher.options import Values
from dali_launch.launcher.run_config import Panel, RunConfig, with_devices
from dali_launch.launcher.run_flags import from_flags
from dali_launch.trainer.config import opt, replaced, tables
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, headline, parse_json, read_json, read_jsonl, write_atomic

SWEPT_TABLES = tuple(tables(RunConfig, "swept"))  # what a point may vary; the job's shape is one


@dataclass(frozen=True)
class SweepConfig:
    sweep: list[str] = field(
        default_factory=list,
        metadata={
            "help": "KEY=V1,V2,... (repeatable): one run per point of the grid.",
            "details": (
                "KEY=V1,V2,... (repeatable): one run per point of the grid of all values; KEY is a training, data "
                "or checkpoint flag (dashes or underscores). SLURM: one job array; --local: one run after another."
            ),
        },
    )
    max_parallel: int | None = opt(
        None,
        "--sweep on SLURM: at most this many points at once.",
        details="With --sweep on SLURM: at most this many points run at once (the array's %N).",
    )


SWEEPS = Panel("Sweeps", (SweepConfig,), "docs/slurm.md")  # its flags' --help panel


# --- the grid ---------------------------------------------------------------------------------------


def axes(specs: list[str]) -> list[tuple[str, list]]:
    """[(field name, typed values)] from `KEY=V1,V2` words, each value checked as a --config file's would be."""
    from dali_launch.launcher import config_file

    known = config_file.settings(())
    found: list[tuple[str, list]] = []
    for spec in specs:
        key, sep, text = spec.partition("=")
        name = key.strip().lstrip("-").replace("-", "_")
        if not sep or not name or not text.strip(","):
            raise UsageError(f"--sweep {spec!r} is not KEY=V1,V2,...; e.g. --sweep learning-rate=0.05,0.1")
        table = next((t for t, keys in known.items() if name in keys), None)
        if table is None:
            keys = [k for t in SWEPT_TABLES for k in known[t]]
            raise UsageError(
                f"--sweep {key}: no such flag{config_file._guess(name, keys)}; sweep one of the "
                f"training, data or checkpoint flags (dali-launch --help)"
            )
        if table not in SWEPT_TABLES:
            raise UsageError(
                f"--sweep {key}: --{name.replace('_', '-')} shapes the job or its submission, which is "
                f"one for the whole sweep; give it once as a flag"
            )
        if name in (n for n, _ in found):
            raise UsageError(f"--sweep {key} is given twice; list all its values in one --sweep {key}=V1,V2")
        found.append((name, [_value(f"--sweep {key}", known[table][name], table, v) for v in text.split(",")]))
    return found


def _value(where: str, field_: dataclasses.Field, table: str, text: str):
    """One value, typed as its field: read as TOML (50, 0.1, true), else as a plain string."""
    import typing

    from dali_launch.launcher import config_file

    kind = typing.get_type_hints(config_file.type_of(table))[field_.name]
    base = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
    if base is str:
        value = text
    else:
        try:
            value = config_file.tomllib.loads(f"v = {text}")["v"]
        except config_file.tomllib.TOMLDecodeError:
            value = text
    return config_file._checked(where, field_, kind, value)


def points(grid: list[tuple[str, list]]) -> list[dict]:
    """Every combination, the last axis varying fastest."""
    names = [name for name, _ in grid]
    return [dict(zip(names, combo)) for combo in itertools.product(*(values for _, values in grid))]


def label(point: dict) -> str:
    return " ".join(f"{k.replace('_', '-')}={v}" for k, v in point.items())


# --- the sweep's runs and record -----------------------------------------------------------------------


@dataclass
class Sweep(Watch):
    """One sweep: its grid, its directory and record; as the route's Watch it records and says each point."""

    name: str
    folder: Path
    grid: list[tuple[str, list]]
    max_parallel: int | None
    record: dict = field(default_factory=dict)
    started: bool = False  # something ran or was submitted: the sweep directory stays, whatever comes

    @property
    def points(self) -> list[dict]:
        return points(self.grid)

    def planned(self) -> str:
        """A dry run's table: the points, nothing run yet."""
        return table(self.grid, [{"index": i, "values": p} for i, p in enumerate(self.points)])

    def write(self, backend: str, paths: list[RunPaths]) -> None:
        """sweep.json, once every point's run directory is made (and again with the array's job id)."""
        self.record = {
            "name": self.name,
            "backend": backend,
            "axes": dict(self.grid),
            "max_parallel": self.max_parallel,
            "points": [
                {"index": i, "values": v, "run_dir": str(p.root)} for i, (v, p) in enumerate(zip(self.points, paths))
            ],
        }
        write_atomic(self.folder / "sweep.json", json.dumps(self.record, indent=2))
        echo(f"sweep directory: {self.folder} ({len(paths)} points)")

    def submitted(self, job_ids: list[str]) -> None:
        self.started = True
        self.record["array_job_id"] = job_ids[0].split("_")[0]
        write_atomic(self.folder / "sweep.json", json.dumps(self.record, indent=2))
        echo(
            f"submitted array job {self.record['array_job_id']}: {len(job_ids)} points, at most "
            f"{min(self.max_parallel or len(job_ids), len(job_ids))} at once; `dali-launch sweep status {self.folder}`"
        )

    def starting(self, index: int) -> None:
        self.started = True
        point = self.record["points"][index]
        echo(f"point {index} ({label(point['values'])}): {point['run_dir']}")

    def ended(self, index: int, outcome: Outcome) -> None:
        if outcome.message and not outcome.ok:
            error(f"point {index}: {outcome.message}")
        row = point_row(self.record["points"][index])
        value = row.get("test")
        echo(
            f"point {index} ({label(row['values'])}): {row['state']}"
            + (f", test {row['metric']} {value:.4f}" if value is not None else "")
        )

    def summary(self) -> str:
        return table(self.grid, status_rows(self.folder))


def sweep_runs(values: Values) -> tuple[Sweep, list[RunConfig]]:
    """`--sweep ...`: the sweep and one run per point of its grid, each named and rooted in the sweep directory."""
    if values.get("resume"):
        raise UsageError("--sweep starts new runs; leave out --resume (continue a point with --resume RUN_DIR alone)")
    grid = axes(values["sweep"])
    also = [n for n, _ in grid if n in values.given and n != "sweep"]
    if also:
        raise UsageError(f"--{also[0].replace('_', '-')} is also swept; give it either as a flag or in --sweep")
    if values.get("max_parallel") is not None and values["max_parallel"] < 1:
        raise UsageError(f"--max-parallel {values['max_parallel']} must be at least 1")
    base = with_devices(from_flags(values), here=False)  # a grid of jobs
    folder = Path(base.launch.run_root).absolute() / f"{base.launch.name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    sweep = Sweep(base.launch.name, folder, grid, values.get("max_parallel"))
    runs = [
        dataclasses.replace(
            _point_run(base, point),
            launch=dataclasses.replace(base.launch, run_root=str(folder), name=f"{base.launch.name}-{i:02d}"),
        )
        for i, point in enumerate(sweep.points)
    ]
    return sweep, runs


def _point_run(base: RunConfig, point: dict) -> RunConfig:
    return replaced(base, **point)


# --- its summary ------------------------------------------------------------------------------------


def status_rows(sweep_dir: Path) -> list[dict]:
    """Each point: its values, its state (as `dali-launch status` says it) and its final (or latest) metrics."""
    return [point_row(point) for point in load(sweep_dir)["points"]]


def point_row(point: dict) -> dict:
    from dali_launch.launcher.backends import registry

    paths = RunPaths(point["run_dir"])
    final = read_json(paths.result, {}).get("final") or _last_epoch(paths)
    return {
        "index": point["index"],
        "values": point["values"],
        "state": str(registry.attach(paths).state()),
        "epochs": final["epoch"] + 1 if final else 0,
        **dict(zip(("metric", "test"), headline(final or {}))),
        "run_dir": str(paths.root),
    }


def _last_epoch(paths: RunPaths) -> dict | None:
    epochs = read_jsonl(paths.metrics)
    return epochs[-1] if epochs else None


def load(sweep_dir: Path) -> dict:
    path = Path(sweep_dir) / "sweep.json"
    if not path.is_file():
        raise UsageError(f"{sweep_dir} is not a sweep directory (no sweep.json); pass the folder `--sweep` printed")
    record, why = parse_json(path)
    if not record or not isinstance(record.get("points"), list):
        raise UsageError(
            f"{path} is damaged ({why or 'no points in it'}); its points are still there: pass one's run directory"
        )
    return record


def table(grid, rows: list[dict]) -> str:
    """Rows as an aligned text table: point, one column per swept flag, state, epochs, accuracy, run directory."""
    names = [name for name, _ in grid]
    metric = next((r["metric"] for r in rows if r.get("test") is not None), "accuracy")
    head = ["point", *(n.replace("_", "-") for n in names), "state", "epochs", f"test {metric}", "run directory"]
    body = [
        [
            str(r["index"]),
            *(str(r["values"][n]) for n in names),
            r.get("state", "planned"),
            str(r.get("epochs", "")),
            f"{r['test']:.4f}" if r.get("test") is not None else "",
            Path(r["run_dir"]).name if r.get("run_dir") else "",
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [head, *body])
