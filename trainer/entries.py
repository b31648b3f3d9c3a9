"""A run's `--model`, `--pipeline` and `--task`: the three loaders by the kind's name (what the Python API and the
objects it sends name them by), and each of the run's own resolved once in a task's process (`Entries`)."""

from __future__ import annotations

from functools import cached_property

from dali_launch.trainer import entry_points
from dali_launch.trainer.data import registry as pipelines
from dali_launch.trainer.entry_points import Sent
from dali_launch.trainer.model import registry as models
from dali_launch.trainer.tasks import registry as tasks
from dali_launch.trainer.tasks.contract import Task

KINDS = {"model": models.MODEL, "pipeline": pipelines.PIPELINE, "task": tasks.TASK}


def builtin(kind: str) -> dict[str, str]:
    """The built-in names of `kind` (model, pipeline or task) and the "module:attribute" each stands for."""
    return KINDS[kind].builtin()


def load(kind: str, name, sent: Sent | None = None):
    """What --KIND `name` stands for, by the loader of `kind` (model, pipeline or task: entry_points.load)."""
    return entry_points.load(KINDS[kind], name, sent)


class Entries:
    """The run's task, model factory and pipeline function, each resolved once in this process when first needed
    (the pipeline before JAX starts only where --decoder auto asks its word: plan/placement.py), from `spec` and
    what the run was sent by value (`sent`: its run directory's objects, entry_points.Sent)."""

    def __init__(self, spec, sent: Sent | None = None):
        self.spec, self.sent = spec, sent

    @cached_property
    def task(self) -> Task:
        return tasks.run_task(self.spec, self.sent)

    @cached_property
    def pipeline(self):
        return pipelines.load(self.spec.data.pipeline, self.sent)

    @cached_property
    def model_factory(self):
        return models.load(self.spec.model.model, self.sent)

    def model(self, options: dict):
        """The module the factory makes with the model `options` (the plan's: StepPlan.model_options)."""
        return models.make(self.spec.model.model, self.model_factory, self.spec.data.num_classes, options)

    def takes(self, option: str) -> bool:
        """Whether the model factory is given `option` (model/registry.py's MODEL_OPTIONS): it names it."""
        return models.takes(self.model_factory, option)
