"""The backends by name, the job handle of any run directory, and a run directory by what a user calls it.

The name is what a run's config.json records (TaskSpec reads an older directory's `none` as `train`),
so `--resume` continues a run in the mode it started in. Modules are imported when asked for: `--help`
and `dali-launch runs` need none of submitit.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from dali_launch.launcher.backends.base import Backend
from dali_launch.launcher.backends.job import BackendJob, LocalJob, read_record
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, read_json

JOB_ID = re.compile(r"^\d+(_\d+)?$")  # a job, or an element of an array


def kind(name: str) -> type[Backend]:
    """The backend class of mode `name` (its class attributes say how it started runs)."""
    if name == "train":
        from dali_launch.launcher.backends.this_process import Train

        return Train
    if name == "local":
        from dali_launch.launcher.backends.local import Local

        return Local
    if name == "slurm":
        from dali_launch.launcher.backends.slurm import Slurm

        return Slurm
    if name == "allocation":
        from dali_launch.launcher.backends.allocation import Allocation

        return Allocation
    raise ValueError(f"no backend {name!r}")


def create(name: str) -> Backend:
    return kind(name)()


def attach(paths: RunPaths) -> BackendJob:
    """The job of any run directory: its SLURM job once it was submitted (job.json), else its processes
    here (`train`, --local, a task of the user's srun step, which all log into the run directory)."""
    if read_record(paths) is not None:
        return create("slurm").attach(paths)
    return LocalJob(paths)


def names_a_path(run: str) -> bool:
    """RUN written as a path (a slash, or a leading dot), never looked up as a run's name."""
    return "/" in run or run.startswith(".")


def find_run(run: str, run_root: str) -> RunPaths:
    """RUN wherever a command takes one (status, logs, cancel, --resume, plot, task --resume, --init-from): a
    run directory (any mode), a run's name under --run-root as `dali-launch runs` lists it, a SLURM job id
    looked up among the runs (and sweeps' runs) under --run-root, or the name given to --name (its newest
    run: _newest_named); a UsageError names which it was taken for."""
    root = Path(run_root)
    found = [folder for folder in (Path(run), root / run) if folder.is_dir()] or _sweep_point(root, run)
    if found:
        if not RunPaths(found[0]).config.is_file():
            raise UsageError(f"{found[0]} is not a run directory (no config.json); pass one that dali-launch made")
        return RunPaths(found[0].absolute())
    if JOB_ID.match(run):
        for record in sorted([*root.glob("*/job.json"), *root.glob("*/*/job.json")], reverse=True):
            if str(read_json(record, {}).get("job_id")) == run:
                return RunPaths(record.parent.absolute())
    if names_a_path(run):
        raise UsageError(f"{run}: no such run directory; pass one that dali-launch made (see `dali-launch runs`)")
    named = _newest_named(root, run)
    if named:
        return named
    if JOB_ID.match(run):
        raise UsageError(f"no run of job {run} under --run-root {root.absolute()}; pass its run directory instead")
    raise UsageError(
        f"no run named {run} under --run-root {root.absolute()}; pass a run directory, a run name "
        f"`dali-launch runs {run_root}` lists, or a SLURM job id"
    )


def _newest_named(root: Path, name: str) -> RunPaths | None:
    """The newest run `--name NAME` made under `root`, or None. Refused where that is not plainly the one
    meant: another run of that name is live (running or queued) and the newest is not, or several are."""
    from dali_launch.launcher.route.directory import named

    found = [RunPaths(p.absolute()) for p in named(root, name)]
    if len(found) > 1:
        live = [p for p in found if attach(p).live_state()]
        if len(live) > 1 or (live and live[-1].root != found[-1].root):
            shown = [p for p in found if p in live or p is found[-1]]
            listing = ", ".join(
                f"{p.root.relative_to(root.absolute())} ({attach(p).state()}{', the newest' if p is found[-1] else ''})"
                for p in shown
            )
            raise UsageError(
                f"{name} names {len(found)} runs under --run-root {root.absolute()}, and one that runs is not the "
                f"newest: {listing}; pass the name of the one you mean"
            )
    return found[-1] if found else None


def _sweep_point(root: Path, name: str) -> list[Path]:
    """A sweep's point by the name `runs` prints under its sweep; a name two sweeps share is refused."""
    if names_a_path(name):
        return []
    points = sorted(p for p in root.glob(f"*/{glob.escape(name)}") if (p.parent / "sweep.json").is_file())
    if len(points) > 1:
        named = ", ".join(str(p.relative_to(root)) for p in points)
        raise UsageError(
            f"{len(points)} sweeps under --run-root {root.absolute()} have a point {name}: pass one of {named}"
        )
    return points
