"""`dali-launch sweep status SWEEP_DIR`: each point of a sweep (route/sweep.py keeps its record)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def status(
    sweep_dir: Annotated[Path, typer.Argument(help="The sweep directory `--sweep` printed.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list instead of a table.")] = False,
):
    """Each point of a sweep: its values, state and final (or latest) metrics."""
    from dali_launch.launcher.route import sweep

    rows = sweep.status_rows(sweep_dir)
    typer.echo(json.dumps(rows, indent=2) if as_json else sweep.table(sweep.load(sweep_dir)["axes"].items(), rows))
