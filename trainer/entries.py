"""A run's `--model`, `--pipeline` and `--task`: the three loaders by the kind's name (what the Python API and the
objects it sends name them by), and each of the run's own resolved once in a task's process (`Entries`)."""

from __future__ import annotations

from dali_launch.trainer.data import registry as pipelines
from dali_launch.trainer.model import registry as models
from dali_launch.trainer.tasks import registry as tasks

KINDS = {"model": models.MODEL, "pipeline": pipelines.PIPELINE, "task": tasks.TASK}


def builtin(kind: str) -> dict[str, str]:
    """The built-in names of `kind` (model, pipeline or task) and the "module:attribute" each stands for."""
    return KINDS[kind].builtin()
