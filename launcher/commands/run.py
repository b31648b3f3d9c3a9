"""The commands that run something: a job (no command), `train` (this process), `task` (one task of the
user's own srun step). Each builds the run's configuration and hands it to the route (route/launch.py)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dali_launch.launcher.options import config_options
from dali_launch.launcher.route.sweep import SWEEPS
from dali_launch.launcher.run_config import NOT_SLURM, RUN_OPTIONS
from dali_launch.launcher.run_flags import from_flags
from dali_launch.launcher.usage import show_version
from dali_launch.trainer.errors import UsageError


@config_options(*RUN_OPTIONS, SWEEPS)
def submit(
    values: dict,
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=show_version, help="Print the version and exit."),
    ] = False,
):
    """With no command: run a job, on SLURM (default) or with --local on this machine."""
    if ctx.invoked_subcommand is not None:
        given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name).name != "DEFAULT"]
        if given:
            raise UsageError(f"{given[0]} goes after the command: dali-launch {ctx.invoked_subcommand} {given[0]} ...")
        return
    from dali_launch.launcher.route import launch

    if values["sweep"]:
        sys.exit(launch.new_sweep(values))
    if values["max_parallel"] is not None:
        raise UsageError("--max-parallel caps the points of a --sweep running at once; give a --sweep, or leave it out")
    sys.exit(launch.resume_run(values, "launch") if values["resume"] else launch.new_run(from_flags(values)))


# A job's shape and --local's own bound: `train` is one process here (it refuses the first three, ignores the last)
NOT_TRAIN = ("nodes", "tasks_per_node", "local", "local_timeout_s")


@config_options(*NOT_SLURM, hidden=NOT_TRAIN)
def train(values: dict):
    """Train in this one process on all its devices (GPUs, else --gpus-per-node CPU devices)."""
    from dali_launch.launcher.route import launch

    sys.exit(launch.resume_run(values, "train") if values["resume"] else launch.new_run(from_flags(values), here=True))


@config_options(*NOT_SLURM)
def task(values: dict):
    """One task of your own SLURM job step: `srun dali-launch task ...` in an sbatch script or salloc.
    The job's shape comes from the step; `dali-launch slurm template` prints a script to start from."""
    from dali_launch.launcher.backends.allocation import Allocation, from_step
    from dali_launch.launcher.route import launch

    backend = Allocation()
    if values["resume"]:  # the run goes on in this step's tasks, not as a job of its own
        sys.exit(launch.resume_run(from_step(values, backend.env), "task", backend))
    sys.exit(launch.launch([from_flags(from_step(values, backend.env))], backend))
