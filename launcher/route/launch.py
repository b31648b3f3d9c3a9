"""Running runs, one way for every mode and count: prepare -> the backend runs them -> report.

    dali-launch train            -> Train   (this process)
    dali-launch --local ...      -> Local   (the job's processes on this machine)
    dali-launch ...              -> Slurm   (a SLURM job through submitit)
    dali-launch --resume RUN     -> whichever started RUN (its config.json says)
    dali-launch --sweep K=A,B    -> the grid's runs: one SLURM job array, or --local one after another
    srun dali-launch task ...    -> Allocation (this task of the user's own step)
    dali-launch ci               -> Slurm, with the test suite's job beside the run's (ci/cluster_ci.py)

    Executor(...).submit(...)    -> submit: the same preparation, the tasks started and not waited for
                                    (Backend.start: SLURM as --detach; here and --local a follower process);
                                    submit_array: several runs, one SLURM job array or one after another

One run is a list of one. Every run of a list is checked before anything is written or submitted.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from dali_launch.launcher.backends import registry
from dali_launch.launcher.backends.base import Backend, Outcome, Watch
from dali_launch.launcher.backends.job import BackendJob
from dali_launch.launcher.console import echo, error
from dali_launch.launcher.options import Values
from dali_launch.launcher.route import resume
from dali_launch.launcher.route.prepare import prepare
from dali_launch.launcher.route.sweep import Sweep, sweep_runs
from dali_launch.launcher.run_config import RunConfig, absolute_paths, counted, with_devices
from dali_launch.trainer.config import replaced
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, headline, read_json


def new_run(run: RunConfig, here: bool = False) -> int:
    """A new run: `train` in this process, else a job (--local, or SLURM), followed to its end (the CLI)."""
    mode = "train" if here else "local" if run.launch.local else "slurm"
    return launch([with_devices(run, mode == "train")], registry.create(mode))


def submit(run: RunConfig, mode: str) -> BackendJob:
    """A new run of `mode` (train, local, slurm) as `new_run` makes it -- the same checks, the same run directory
    -- its tasks started and not waited for (Backend.start): the Python API's submit (launcher/api/)."""
    return submit_array([run], mode)[0]


def submit_array(runs: list[RunConfig], mode: str) -> list[BackendJob]:
    """New runs as `submit` makes one, every one checked before any is written: the Python API's submit_array.
    Several runs are one job array on SLURM, else run one after another, as a sweep's are."""
    backend = registry.create(mode)
    prepared = _prepared([with_devices(run, mode == "train") for run in runs], backend, started=True)
    if prepared is None:
        raise UsageError("dry_run prints what would run and starts nothing; leave it out to submit the run")
    runs, paths = prepared
    for run_paths in paths if len(paths) > 1 else []:  # one run's: prepare said it
        echo(f"run directory: {run_paths.root}")
    return backend.start(runs, paths)


def resume_run(values: Values, entry: str, backend: Backend | None = None) -> int:
    """`--resume RUN`: the run continues in the mode it started in, from its own configuration; `backend`:
    the tasks of the user's own srun step instead (`task --resume`, every task of it here)."""
    lead = backend is None or backend.process_id == 0
    how = resume.read(values, entry, lead)
    changes = f"; changed: {how.describe()}" if how.changes else ""
    backend = backend or registry.create(how.backend)
    if lead:
        echo(f"resuming {how.run.launch.resume} (started by `{backend.started_by}`){changes}")
    return launch([how.run], backend, changed=bool(how.changes))


def new_sweep(values: Values) -> int:
    """`--sweep ...`: the grid's runs, on SLURM as one job array, with --local one after another."""
    grid, runs = sweep_runs(values)
    if runs[0].launch.local:
        return launch(runs, registry.create("local"), sweep=grid)
    from dali_launch.launcher.backends.slurm import Slurm

    return launch(runs, Slurm(array_name=grid.name, max_parallel=grid.max_parallel), sweep=grid)


@dataclass(frozen=True)
class Started:
    """Runs the backend ran: their directories and how each ended (or stands, when detached)."""

    paths: list[RunPaths]
    outcomes: list[Outcome]


def launch(runs: list[RunConfig], backend: Backend, changed: bool = False, sweep: Sweep | None = None) -> int:
    """Runs `runs` through `backend` and reports; the exit code of the command. `sweep`: the runs are its points."""
    started = start(runs, backend, changed, sweep)
    return 0 if started is None else report(started, sweep)


def start(runs: list[RunConfig], backend: Backend, changed: bool = False, sweep: Sweep | None = None) -> Started | None:
    """Checks and prepares every run, then has the backend run them; None after a dry run."""
    prepared = _prepared(runs, backend, changed, sweep)
    if prepared is None:
        return None
    runs, paths = prepared
    if sweep:
        sweep.write(backend.name, paths)
    try:
        return Started(paths, run_all(runs, paths, backend, sweep or Watch()))
    except BaseException:
        if sweep and not sweep.started:  # nothing ran or was submitted: leave nothing behind
            shutil.rmtree(sweep.folder, ignore_errors=True)
        raise


def _prepared(
    runs: list[RunConfig], backend: Backend, changed: bool = False, sweep: Sweep | None = None, started: bool = False
) -> tuple[list[RunConfig], list[RunPaths]] | None:
    """The runs as they will run (their paths absolute) and their directories, every check passed
    (prepare.py); None after a dry run. `started`: the backend starts them and leaves them (Backend.start)."""
    runs = [absolute_paths(_init_from_named(run)) for run in runs]
    paths = prepare(runs, backend, changed, heading=sweep.planned() if sweep else "", started=started)
    return None if paths is None else (runs, paths)


def _init_from_named(run: RunConfig) -> RunConfig:
    """--init-from a run's name (or its SLURM job id): its directory under --run-root, found as --resume finds
    it (registry.find_run); a path is left as given."""
    given = run.model.init_from
    if not given or Path(given).exists() or registry.names_a_path(given):
        return run
    try:
        found = registry.find_run(given, run.launch.run_root).root
    except UsageError as e:
        raise UsageError(f"--init-from {given}: {e}") from None
    return replaced(run, init_from=str(found))


def run_all(runs: list[RunConfig], paths: list[RunPaths], backend: Backend, watch: Watch) -> list[Outcome]:
    """One run, or several: one job array where the backend submits arrays (SLURM), else one after another;
    a run interrupted by a signal stops the rest too."""
    if len(runs) > 1 and backend.arrays:
        return backend.run_array(runs, paths, watch)
    outcomes = []
    for i, (run, run_paths) in enumerate(zip(runs, paths)):
        if len(runs) > 1:
            watch.starting(i)
        outcomes.append(backend.run(run, run_paths))
        if len(runs) > 1:
            watch.ended(i, outcomes[-1])
        if outcomes[-1].code >= 128:
            break
    return outcomes


def report(started: Started, sweep: Sweep | None = None) -> int:
    """One run's end: its summary, or what went wrong; several runs: the sweep's table. The exit code is
    the last failed run's, else 0."""
    outcomes, code = started.outcomes, 0
    for outcome, paths in zip(outcomes, started.paths):
        if len(outcomes) == 1 and outcome.message and not outcome.ok:
            (echo if outcome.code == 0 else error)(outcome.message)
        result = read_json(paths.result) if len(outcomes) == 1 and outcome.ok and outcome.report else None
        if result is not None:  # damaged: noted, and said at the end
            summarize(result, paths)
        code = outcome.code or code
    if sweep:
        echo(sweep.summary())
    return code


def summarize(result: dict, paths: RunPaths) -> None:
    final = result["final"]
    same, devices = len(set(result["checksums"])) == 1, len(result["checksums"])
    replicas = result.get("replicas", devices)  # data-parallel copies: a sharded state's groups hold one each
    agree = f"{replicas} replicas identical; " if same and replicas > 1 else ""
    if not same:
        agree = f"the state DIFFERS between its {devices} devices' copies; "
    metric, value = headline(final)
    echo(
        f"done: test {metric} {value:.4f} after {counted(final['epoch'] + 1, 'epoch')}; {agree}metrics in {paths.metrics}"
    )
