"""A run's configuration from the flags and a --config file (launcher/options.py's values): every command that
starts a run builds it here, once."""

from __future__ import annotations

from dali_launch.launcher.options import build
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.config import replaced


def from_flags(values) -> RunConfig:
    """The run that flags and a --config file make (`values`, which know the names given): a --task's own
    pipeline and model (tasks/contract.py) where --pipeline and --model were left out."""
    from dali_launch.trainer.tasks.registry import run_task

    run = build(RunConfig, values)
    task, given = run_task(run), getattr(values, "given", set(values))
    own = {name: value for name, value in (("pipeline", task.pipeline), ("model", task.model)) if value}
    own = {name: value for name, value in own.items() if name not in given}
    return replaced(run, **own) if own else run
