"""Sweeps: `--sweep KEY=V1,V2,...` (repeatable) runs the grid of all values, each point a complete run.

    dali-launch --nodes 2 --gpus-per-node 8 --sweep learning-rate=0.05,0.1 --sweep batch-size=32,64 --max-parallel 2
    dali-launch sweep status runs/dali-launch-sweep-20261130-120000 [--json]

On SLURM the points are ONE job array (submitit's map_array; --max-parallel is the array's %N), each
element a multi-node job of its own with its own run directory, all made before submission; with
--local they run one after another. The sweep directory keeps the sweep's own record (sweep.json:
the axes, each point's values and run directory, the array's job id); the run directories keep the rest.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from dali_launch.launcher.options import Values
from dali_launch.trainer.config import opt
from dali_launch.trainer.errors import UsageError

SWEPT_TABLES = ("data", "train", "distributed", "resilience")  # what a point may vary; the job's shape is one
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED"}
POLL_S = 2.0


@dataclass(frozen=True)
class SweepConfig:
    sweep: list[str] = field(
        default_factory=list,
        metadata={
            "help": "KEY=V1,V2,... (repeatable): one run per point of the grid of all values; KEY is a training, data "
            "or checkpoint flag (dashes or underscores). SLURM: one job array; --local: one run after another."
        },
    )
    max_parallel: int | None = opt(
        None, "With --sweep on SLURM: at most this many points run at once (the array's %N)."
    )


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


# --- running it -------------------------------------------------------------------------------------


def run(values: Values) -> int:
    """`--sweep ...`: check every point, make the sweep and run directories, run them; the summary last."""
    from dali_launch.launcher import backends
    from dali_launch.launcher.backends.base import Backend
    from dali_launch.launcher.config import RunConfig
    from dali_launch.launcher.console import echo
    from dali_launch.launcher.options import build
    from dali_launch.launcher.route import prepare

    if values.get("resume"):
        raise UsageError("--sweep starts new runs; leave out --resume (continue a point with --resume RUN_DIR alone)")
    grid = axes(values["sweep"])
    also = [n for n, _ in grid if n in values.given and n != "sweep"]
    if also:
        raise UsageError(f"--{also[0].replace('_', '-')} is also swept; give it either as a flag or in --sweep")
    if values.get("max_parallel") is not None and values["max_parallel"] < 1:
        raise UsageError(f"--max-parallel {values['max_parallel']} must be at least 1")
    base = build(RunConfig, {**values, "gpus_per_node": values.get("gpus_per_node") or 1})
    sweep_dir = Path(base.launch.run_root).absolute() / f"{base.launch.name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    grid_points = points(grid)
    runs_ = [
        dataclasses.replace(
            _point_run(base, point),
            launch=dataclasses.replace(base.launch, run_root=str(sweep_dir), name=f"{base.launch.name}-{i:02d}"),
        )
        for i, point in enumerate(grid_points)
    ]
    backend = backends.create("local" if base.launch.local else "slurm")
    data = []
    for i, point_run in enumerate(runs_):  # every point checked before anything is written or submitted
        # The backend's checks (SLURM's flags, the cluster) see one job shape, the same for every point.
        prepare.check(point_run, backend if i == 0 else Backend())
        data.append(prepare.data_of(point_run))
    if base.launch.dry_run:
        echo(table(grid, [{"index": i, "values": p} for i, p in enumerate(grid_points)]))
        if not base.launch.local:
            echo(array_script(runs_[0], base.launch.name, sweep_dir, len(runs_), values.get("max_parallel")))
        return 0
    sweep_dir.mkdir(parents=True)
    record = {
        "name": base.launch.name,
        "backend": backend.name,
        "axes": dict(grid),
        "max_parallel": values.get("max_parallel"),
        "points": [],
    }
    try:
        for i, (point_run, point, data_dir) in enumerate(zip(runs_, grid_points, data)):
            paths = backend.make_run_dir(point_run, data_dir)
            record["points"].append({"index": i, "values": point, "run_dir": str(paths.root)})
        _write(sweep_dir, record)
        echo(f"sweep directory: {sweep_dir} ({len(runs_)} points)")
        if base.launch.local:
            return _run_locally(runs_, sweep_dir, record)
        record["array_job_id"] = _submit(runs_, sweep_dir, record, values.get("max_parallel"))
    except BaseException:
        if not record.get("array_job_id") and not base.launch.local:
            import shutil

            shutil.rmtree(sweep_dir, ignore_errors=True)  # nothing was submitted: leave nothing behind
        raise
    _write(sweep_dir, record)
    echo(
        f"submitted array job {record['array_job_id']}: {len(runs_)} points, at most "
        f"{values.get('max_parallel') or len(runs_)} at once; `dali-launch sweep status {sweep_dir}`"
    )
    if base.slurm.detach:
        return 0
    return _wait(sweep_dir, record, deadline_s=_deadline_s(base, len(runs_), values.get("max_parallel")))


def _point_run(base, point: dict):
    tables = {}
    for name, value in point.items():
        table = next(t for t in SWEPT_TABLES if name in {f.name for f in dataclasses.fields(getattr(base, t))})
        tables.setdefault(table, {})[name] = value
    return dataclasses.replace(base, **{t: dataclasses.replace(getattr(base, t), **v) for t, v in tables.items()})


def _write(sweep_dir: Path, record: dict) -> None:
    from dali_launch.trainer.run_dir import write_atomic

    write_atomic(sweep_dir / "sweep.json", json.dumps(record, indent=2))


def array_script(run, name: str, sweep_dir: Path, count: int, max_parallel: int | None) -> str:
    """submitit's own batch script for the array (what a dry run shows)."""
    from dali_launch.launcher.backends.slurm import batch_script, make_executor

    executor = _executor(make_executor(run, sweep_dir / "submitit", preview=True), name, count, max_parallel)
    executor.parameters["map_count"] = count  # what map_array sets on its copy of the executor
    return batch_script(executor)


def _executor(executor, name: str, count: int, max_parallel: int | None):
    executor.update_parameters(job_name=name, array_parallelism=min(max_parallel or count, count))
    return executor


def _submit(runs_, sweep_dir: Path, record: dict, max_parallel: int | None) -> str:
    from dali_launch.launcher.backends.slurm import make_executor
    from dali_launch.trainer.run_dir import write_atomic
    from dali_launch.trainer.task import run_task

    folder = sweep_dir / "submitit"
    executor = _executor(make_executor(runs_[0], folder), record["name"], len(runs_), max_parallel)
    dirs = [p["run_dir"] for p in record["points"]]
    try:
        jobs = executor.map_array(run_task, dirs)
    except Exception as e:
        raise UsageError(f"sbatch refused the array: {str(e).strip().splitlines()[-1]}") from None
    for job, run_dir in zip(jobs, dirs):  # `dali-launch status/logs/cancel RUN_DIR` find each point's job
        write_atomic(Path(run_dir) / "job.json", json.dumps({"job_id": job.job_id, "submitit": str(folder)}))
    return jobs[0].job_id.split("_")[0]


def _deadline_s(run, count: int, max_parallel: int | None) -> int:
    from dali_launch.launcher.backends.slurm import follow_timeout_s

    waves = -(-count // min(max_parallel or count, count))
    return follow_timeout_s(run) * waves


def _wait(sweep_dir: Path, record: dict, deadline_s: float) -> int:
    """Until every element has left the queue (or the deadline), saying each point's end as it comes."""
    from dali_launch.launcher.console import echo

    end, told = time.monotonic() + deadline_s, set()
    while True:
        rows = status_rows(sweep_dir)
        for row in rows:
            if row["index"] not in told and row["state"] not in ACTIVE:
                told.add(row["index"])
                echo(
                    f"point {row['index']} ({label(row['values'])}): {row['state']}"
                    + (f", test accuracy {row['test_accuracy']:.4f}" if row.get("test_accuracy") is not None else "")
                )
        if len(told) == len(rows) or time.monotonic() > end:
            break
        time.sleep(POLL_S)
    echo(table(record["axes"].items(), rows))
    return 0 if all(row["state"] == "COMPLETED" for row in rows) else 1


def _run_locally(runs_, sweep_dir: Path, record: dict) -> int:
    """--local: the points one after another, each as `dali-launch --local` runs one; a stop signal ends the sweep."""
    from dali_launch.launcher import backends
    from dali_launch.launcher.console import echo, error
    from dali_launch.trainer.run_dir import RunPaths

    code = 0
    for point_run, point in zip(runs_, record["points"]):
        echo(f"point {point['index']} ({label(point['values'])}): {point['run_dir']}")
        backend = backends.create("local")
        backend.start(point_run, RunPaths(point["run_dir"]))
        outcome = backend.wait()
        if not outcome.ok:
            error(f"point {point['index']}: {outcome.message}")
            code = outcome.code
            if outcome.code >= 128:  # interrupted: the rest of the sweep stops too
                break
    echo(table(record["axes"].items(), status_rows(sweep_dir)))
    return code


# --- its summary ----------------------------------------------------------------------------------


def status_rows(sweep_dir: Path) -> list[dict]:
    """Each point: its values, its state (as `dali-launch status` says it) and its final (or latest) metrics."""
    from dali_launch.launcher.commands import jobs as job_control
    from dali_launch.trainer.run_dir import RunPaths

    record = load(sweep_dir)
    rows = []
    for point in record["points"]:
        paths = RunPaths(point["run_dir"])
        run = job_control.find(str(paths.root), str(sweep_dir))
        state = run.state()
        if isinstance(run, job_control.LocalRun) and not paths.manifest.exists() and state != "RUNNING":
            state = "NOT STARTED"
        state = state.split(" ", 1)[0].rstrip(":;")  # the word; `dali-launch status RUN_DIR` says the rest
        final = json.loads(paths.result.read_text())["final"] if paths.result.exists() else _last_epoch(paths)
        rows.append(
            {
                "index": point["index"],
                "values": point["values"],
                "state": state,
                "epochs": final["epoch"] + 1 if final else 0,
                "test_accuracy": final.get("test_accuracy") if final else None,
                "run_dir": str(paths.root),
            }
        )
    return rows


def _last_epoch(paths) -> dict | None:
    lines = paths.metrics.read_text().splitlines() if paths.metrics.exists() else []
    return json.loads(lines[-1]) if lines else None


def load(sweep_dir: Path) -> dict:
    path = Path(sweep_dir) / "sweep.json"
    if not path.is_file():
        raise UsageError(f"{sweep_dir} is not a sweep directory (no sweep.json); pass the folder `--sweep` printed")
    return json.loads(path.read_text())


def table(grid, rows: list[dict]) -> str:
    """Rows as an aligned text table: point, one column per swept flag, state, epochs, accuracy, run directory."""
    names = [name for name, _ in grid]
    head = ["point", *(n.replace("_", "-") for n in names), "state", "epochs", "test accuracy", "run directory"]
    body = [
        [
            str(r["index"]),
            *(str(r["values"][n]) for n in names),
            r.get("state", "planned"),
            str(r.get("epochs", "")),
            f"{r['test_accuracy']:.4f}" if r.get("test_accuracy") is not None else "",
            Path(r["run_dir"]).name if r.get("run_dir") else "",
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [head, *body])
