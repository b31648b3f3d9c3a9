"""`--task`: the built-in tasks by name, and a Task (or a factory of one) of the user's own, loaded and made with
the options it names (entry_points.py: what the three loaders share). Nothing heavy at import: a task's JAX is
imported where it runs.
"""

from __future__ import annotations

import inspect

from dali_launch.trainer import entry_points
from dali_launch.trainer.entry_points import Kind, Sent
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.tasks.contract import OPTIONS, Task

TASKS = {
    "classification": "dali_launch.trainer.tasks.classification:classification",
    "segmentation": "dali_launch.trainer.tasks.segmentation:segmentation",
    "detection": "dali_launch.trainer.tasks.detection:detection",
    "contrastive": "dali_launch.trainer.tasks.contrastive:contrastive",
    "video": "dali_launch.trainer.tasks.video:video",
    "audio": "dali_launch.trainer.tasks.audio:audio",
}


def _call(signature: inspect.Signature) -> tuple[str, tuple, dict]:
    """factory(num_classes=N, ...): each option of tasks/contract.py's OPTIONS it names."""
    return "factory(num_classes=N, ...)", (), {name: None for name in OPTIONS if name in signature.parameters}


TASK = Kind("task", "task", "docs/tasks.md", lambda: TASKS, _call, whole=lambda value: isinstance(value, Task))


def load(name, sent: Sent | None = None):
    """The Task or factory `--task name` stands for (entry_points.load)."""
    return entry_points.load(TASK, name, sent)


def create_task(name: str, sent: Sent | None = None, **options) -> Task:
    """`--task NAME`: a Task as it is, or its factory called with the `options` it names (tasks/contract.py's
    OPTIONS: num_classes, label_smoothing, mixup, cutmix)."""
    value = load(name, sent)
    _options_taken(name, value, options)
    if not isinstance(value, Task):
        try:
            value = value(**{k: v for k, v in options.items() if k in entry_points.named(value)})
        except UsageError:  # the factory refused an option itself, in its own words
            raise
        except Exception as e:  # the user's factory: one line, where
            raise UsageError(f"--task {name}: its factory raised {type(e).__name__}: {e}; fix the factory") from None
        if not isinstance(value, Task):
            raise UsageError(f"--task {name} returned a {type(value).__name__}, not a Task (tasks/contract.py)")
    return value


def _options_taken(name: str, value, options: dict) -> None:
    """A task option set (not 0) that the task's factory does not name (or any, for a Task as it is) would be
    ignored: refused in one line. --num-classes is every data set's, taken or not."""
    takes = () if isinstance(value, Task) else entry_points.named(value)
    for option, setting in options.items():
        if setting and option != "num_classes" and option not in takes:
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"{flag} {setting}: --task {name} does not take {flag}; leave it out")


def task_bringing(pipeline: str) -> str:
    """The built-in task whose own --pipeline is `pipeline`, or "" (what a run of that pipeline should add)."""
    return next((name for name in TASKS if create_task(name).pipeline == pipeline), "")


def task_options(spec) -> dict:
    """The settings a task factory may take: --num-classes and the [task] table's options."""
    values = {"num_classes": spec.data.num_classes, **vars(spec.task)}
    return {name: values[name] for name in OPTIONS}


def run_task(spec, sent: Sent | None = None) -> Task:
    """The run's task: --task with the options it names."""
    return create_task(spec.task.task, sent, **task_options(spec))
