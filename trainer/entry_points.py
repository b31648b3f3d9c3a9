"""`--model` and `--pipeline` values: a built-in name, or `package.module:attribute` of the user's own.

    dali-launch train --model cnn                                    # built-in
    dali-launch train --model mypkg.models:build --pipeline mypkg.pipe:make --data-dir DIR

The module must be importable where the tasks run: installed, or its folder on PYTHONPATH (local
tasks inherit the environment; sbatch exports it by default). What the attribute must be is
documented where it is used: model/models.py (a model factory), data/contract.py (a pipeline function).
This module imports nothing heavy, so the launcher checks built-in names without starting JAX.
"""

from __future__ import annotations

import importlib
import inspect

from dali_launch.trainer.errors import UsageError

BUILTIN = {
    "model": {
        "mlp": "dali_launch.trainer.model.models:MLP",
        "cnn": "dali_launch.trainer.model.models:CNN",
        "resnet18": "dali_launch.trainer.model.models:ResNet18",
        "resnet50": "dali_launch.trainer.model.resnet:resnet50",
        "vit-ti16": "dali_launch.trainer.model.vit:vit_ti16",
        "vit-s16": "dali_launch.trainer.model.vit:vit_s16",
        "vit-b16": "dali_launch.trainer.model.vit:vit_b16",
    },
    "pipeline": {
        "mnist": "dali_launch.trainer.data.pipelines:mnist",
        "folders": "dali_launch.trainer.data.pipelines:folders",
        "tfrecord": "dali_launch.trainer.data.pipelines:tfrecord",
        "webdataset": "dali_launch.trainer.data.pipelines:webdataset",
    },
}


def load(kind: str, name: str):
    """The callable `name` stands for (`kind` is model or pipeline), or a one-line UsageError with the fix."""
    flag, target = f"--{kind} {name}", BUILTIN[kind].get(name, name)
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"unknown {flag}; use one of {', '.join(BUILTIN[kind])}, or package.module:{_factory(kind)}")
    try:
        value = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(
            f"{flag}: cannot import {module_name} ({e}); install it or put its folder on PYTHONPATH"
        ) from None
    except Exception as e:  # the module itself is broken: say where, not a traceback
        raise UsageError(f"{flag}: importing {module_name} failed ({type(e).__name__}: {e}); fix that module") from None
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise UsageError(f"{flag}: module {module_name} has no attribute {attribute}; check the name after ':'")
        value = getattr(value, part)
    if not callable(value):
        raise UsageError(f"{flag}: {attribute} is a {type(value).__name__}, not a callable {_factory(kind)}")
    _check_signature(flag, value, kind)
    return value


def check(kind: str, name: str, num_classes: int = 10) -> None:
    """What the launcher calls before writing anything: built-in names cost nothing; others are imported,
    and a model factory is called (cheap: a Flax module is a dataclass until it is initialised), so a
    broken contract is refused before the run directory exists rather than at the task's start."""
    if name in BUILTIN[kind]:
        return
    load(kind, name)
    if kind == "model":
        # Imports flax, which the user's module has imported already.
        from dali_launch.trainer.model.models import create_model

        create_model(name, num_classes)


_CALLS = {"model": ("factory(num_classes=N)", (), {"num_classes": 10}), "pipeline": ("function(args)", (None,), {})}


def _check_signature(flag: str, value, kind: str) -> None:
    """The call the trainer will make binds to `value`'s parameters: a TypeError raised by the call
    itself (deep inside DALI's pipeline_def, for a pipeline) would be a traceback."""
    call, args, kwargs = _CALLS[kind]
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # some callables (C functions) have no signature to read
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise UsageError(f"{flag} cannot be called as {call} ({e}); see the contract in the README") from None


def _factory(kind: str) -> str:
    return {"model": "factory", "pipeline": "function"}[kind]
