"""`dali-launch config show`: the effective settings, as a --config file (config_file.py writes it)."""

from __future__ import annotations

import typer

from dali_launch.launcher.options import config_options
from dali_launch.launcher.run_config import RUN_OPTIONS
from dali_launch.launcher.run_flags import from_flags


@config_options(*RUN_OPTIONS)
def show(values: dict):
    """Print the effective configuration (defaults < --config FILE < flags) as TOML, itself a --config file."""
    from dali_launch.launcher.config_file import dumps
    from dali_launch.launcher.route.checks import validate

    run = from_flags(values)
    validate(run)
    typer.echo(dumps(run), nl=False)
