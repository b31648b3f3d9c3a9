"""A model, pipeline or task given to Executor.submit as a Python object, named as the run's settings name it.

An object its tasks import by reference (`module:qualname` leads to the object itself, from a module other than
__main__) is named as the CLI's flag would name it: a built-in by its own name (the MLP class is `mlp`), any other
as `module:qualname`, which a fresh interpreter with the tasks' environment must import too (sent_objects.check).
Any other object -- defined in a notebook or in __main__, inside a function, an instance, a functools.partial --
is sent by value (launcher/route/sent_objects.py).
"""

from __future__ import annotations

import sys

from dali_launch.launcher.api.settings import a_type
from dali_launch.launcher.route import sent_objects
from dali_launch.trainer import entries
from dali_launch.trainer.errors import UsageError


def reference(kind: str, value) -> str:
    """What the run's `kind` setting records for `value` (a string as it is)."""
    if isinstance(value, str):
        return value
    if not callable(value) and not (kind == "task" and _is_task(value)):
        what = {"model": "a Flax module class or factory", "pipeline": "a pipeline function", "task": "a Task"}[kind]
        raise UsageError(
            f"{kind}={value!r} is {a_type(value)}; give {what}, or a name as --{kind} takes it "
            f"(one of {', '.join(entries.builtin(kind))}, or package.module:attribute)"
        )
    builtin = builtin_name(kind, value)
    if builtin is not None:  # a built-in: its tasks import it as they import dali-launch
        return builtin
    importable = importable_as(value)
    if importable is None:
        return sent_objects.by_value(kind, value, label(value))
    return sent_objects.by_reference(kind, label(value), importable)


def builtin_name(kind: str, value) -> str | None:
    """The built-in name of `kind` that stands for `value` itself (dali_launch.models["vit-ti16"], or the object
    imported from its module: a factory made by a function, a Pipeline, which no qualname leads to), else None.
    Only modules already imported are looked in: a built-in object came from one."""
    targets = entries.builtin(kind).items()
    return next((name for name, target in targets if _found(*target.split(":", 1)) is value), None)


def importable_as(value) -> str | None:
    """`module:qualname` where importing the module and following the qualname gives `value` itself, else None."""
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__" or "<" in qualname:
        return None  # __main__ is another program's in the tasks; `<locals>`, `<lambda>` are nobody's attribute
    return f"{module}:{qualname}" if _found(module, qualname) is value else None


def _found(module: str, qualname: str):
    """What `qualname` leads to in the already imported `module`, or None."""
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def label(value) -> str:
    """How messages call an object: its qualified name, else its class's (`Task object`)."""
    name = getattr(value, "__qualname__", None)
    return name if isinstance(name, str) else f"{type(value).__name__} object"


def _is_task(value) -> bool:
    from dali_launch.trainer.tasks.contract import Task

    return isinstance(value, Task)
