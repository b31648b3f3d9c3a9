"""`dali-launch slurm template`: an sbatch script of the user's own (backends/slurm_template.py writes it)."""

from __future__ import annotations

import typer

from dali_launch.launcher.options import config_options
from dali_launch.launcher.run_config import RUN_OPTIONS
from dali_launch.launcher.run_flags import from_flags


@config_options(*RUN_OPTIONS)
def template(values: dict):
    """Print an sbatch script that runs `srun dali-launch task` with these flags: adapt it, then sbatch it."""
    from dali_launch.launcher.backends import slurm_template
    from dali_launch.launcher.backends.slurm_checks import validate_slurm
    from dali_launch.launcher.route.checks import validate

    run = from_flags(values)
    validate(run)
    validate_slurm(run)
    typer.echo(slurm_template.template(run, values), nl=False)
