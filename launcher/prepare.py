"""The one preparation path every launch takes: checks -> the run directory -> (a dry run stops here).

Checks come first and write nothing: the configuration, CUDA flavours, --model/--pipeline contracts,
the backend's own (SLURM's flags and cluster), the run root, the data. Then the run directory is
created, or reopened for --resume (launcher/resume.py made the run's configuration from it). A dry
run prints the plan where the directory would be written, and nothing is.
"""

from __future__ import annotations

from pathlib import Path

from dali_launch.launcher import init_check, plan, runs
from dali_launch.launcher.backends.base import Backend
from dali_launch.launcher.checks import validate
from dali_launch.launcher.config import RunConfig, task_spec
from dali_launch.launcher.console import echo
from dali_launch.launcher.data import datasets
from dali_launch.trainer import entry_points, flavours
from dali_launch.trainer.run_dir import RunPaths


def prepare(run: RunConfig, backend: Backend, changed: bool = False) -> RunPaths | None:
    """The run directory the tasks will read, or None after a dry run. `changed`: a resumed run's
    configuration differs from what its directory holds (more epochs, say) and is written back."""
    check(run, backend)
    data_dir = data_of(run)
    if run.launch.dry_run:
        run_dir = Path(run.launch.resume or Path(run.launch.run_root).absolute() / "RUN_DIR")
        echo(plan.describe(run))
        echo(backend.plan(run, run_dir, task_spec(run, str(run_dir), str(data_dir), backend.spec_name).to_json()))
        return None
    if run.launch.resume:
        return runs.reopen(run, data_dir, backend.spec_name, changed)
    paths = backend.make_run_dir(run, data_dir)
    echo(f"run directory: {paths.root}")
    return paths


def check(run: RunConfig, backend: Backend) -> None:
    """Every check before anything is written, cheapest first."""
    validate(run)
    flavours.check()  # before any device is taken or job queued; the task checks again
    entry_points.check("model", run.train.model, run.data.num_classes)
    entry_points.check("pipeline", run.data.pipeline)
    init_check.check(run)  # --init-from's shapes, in a child on the CPU (seconds; only with the flag)
    backend.check(run)
    if not run.launch.resume:
        runs.check_root(run.launch.run_root)


def data_of(run: RunConfig) -> Path:
    """The run's data, checked: the flags' (or the default) for a new run, the run's own when resuming."""
    if run.launch.resume:
        return datasets.check_reopened(Path(run.launch.resume))
    return datasets.resolve(run.data.data_dir, run.data.pipeline, run.data.num_classes)
