"""`--model`, `--pipeline` and `--task` values: a built-in name, or `package.module:attribute` of the user's own.

    dali-launch train --model cnn                                    # built-in
    dali-launch train --model mypkg.models:build --pipeline mypkg.pipe:make --data-dir DIR
    dali-launch train --task mypkg.tasks:regression --model mypkg.models:build --pipeline mypkg.pipe:make

The module must be importable where the tasks run: installed, or its folder on PYTHONPATH (local
tasks inherit the environment; sbatch exports it by default). An object the Python API sent by value
(defined in a notebook or in __main__: launcher/route/sent_objects.py) is named `<run>:NAME`: the
run directory's objects/NAME.pkl, read by each task (`read_sent`). What the attribute must be is
documented where it is used: model/models.py (a model factory), data/contract.py (a pipeline function),
tasks/contract.py (a Task or its factory).
This module imports nothing heavy, so the launcher checks built-in names without starting JAX; Flax
only where a model is made (`create_model`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pickle
from pathlib import Path

from dali_launch.trainer.data import formats, native
from dali_launch.trainer.errors import UsageError

MODELS = {
    "mlp": "dali_launch.trainer.model.models:MLP",
    "cnn": "dali_launch.trainer.model.models:CNN",
    "cnn-nnx": "dali_launch.trainer.model.cnn_nnx:CNN",
    "resnet18": "dali_launch.trainer.model.models:ResNet18",
    "resnet50": "dali_launch.trainer.model.resnet:resnet50",
    "vit-ti16": "dali_launch.trainer.model.vit:vit_ti16",
    "vit-s16": "dali_launch.trainer.model.vit:vit_s16",
    "vit-b16": "dali_launch.trainer.model.vit:vit_b16",
    "unet": "dali_launch.trainer.model.unet:UNet",
    "simclr-cnn": "dali_launch.trainer.model.contrastive:SimCLR",
    "centernet": "dali_launch.trainer.model.centernet:CenterNet",
    "st-cnn": "dali_launch.trainer.model.video:SpaceTimeCNN",
    "frame-mean": "dali_launch.trainer.model.video:FrameMean",
    "vivit-ti16": "dali_launch.trainer.model.video:vivit_ti16",
    "audio-cnn": "dali_launch.trainer.model.audio_cnn:AudioCNN",
}
TASKS = {
    "classification": "dali_launch.trainer.tasks.classification:classification",
    "segmentation": "dali_launch.trainer.tasks.segmentation:segmentation",
    "detection": "dali_launch.trainer.tasks.detection:detection",
    "contrastive": "dali_launch.trainer.tasks.contrastive:contrastive",
    "video": "dali_launch.trainer.tasks.video:video",
    "audio": "dali_launch.trainer.tasks.audio:audio",
}
# The built-ins with blocks that --mesh's tensor axis splits (plan/mesh.py's TENSOR_RULES name their layers): vit.py's
TENSOR_SPLIT = tuple(name for name, target in MODELS.items() if target.startswith("dali_launch.trainer.model.vit:"))


def builtin(kind: str) -> dict[str, str]:
    """The built-in names of `kind` (model, pipeline or task) and the "module:attribute" each stands for; the
    pipelines are the formats' own (formats.FORMATS) and the further readings of them (formats.READINGS)."""
    pipelines = {f.name: f.pipeline for f in (*formats.FORMATS, *formats.READINGS)}
    return {"model": MODELS, "task": TASKS}.get(kind) or pipelines


BY_VALUE = "<run>"  # the "module" of an object sent by value: `<run>:NAME` is RUN_DIR/objects/NAME.pkl
_held: dict[str, object] = {}  # NAME -> an object sent by value: the sender's own, or loaded from its pickle
_pickles: dict[str, Path] = {}  # NAME -> its pickle in a run directory, loaded when first named


def hold(name: str, value) -> str:
    """`value`, sent by value under `name` by the launcher that holds it (before its run directory exists): the
    reference that names it, `<run>:NAME`."""
    _held[name] = value
    return f"{BY_VALUE}:{name}"


def forget_sent() -> None:
    """Nothing sent by value is held any more (the launcher, before another submission)."""
    _held.clear()
    _pickles.clear()


def read_sent(objects: Path) -> None:
    """The objects sent by value into a run directory (its objects/ folder, run_dir.RunPaths.objects): each is
    unpickled when first named, so that a model's Flax and JAX are imported where a model is made, not sooner."""
    for path in sorted(Path(objects).glob("*.pkl")):
        _held.pop(path.stem, None)
        _pickles[path.stem] = path


def load(kind: str, name):
    """The callable `name` stands for (`kind` is model, pipeline or task), or a one-line UsageError with the fix.
    `name` may be the object itself (a Python caller's function): it is taken as it is; `<run>:NAME` is one the
    Python API sent by value. A pipeline written as DALI writes one (@pipeline_def, data_iterator) comes back as
    the contract's function(args) (data/native.py)."""
    if not isinstance(name, str):
        return _taken(kind, name, described(name))
    flag, target = f"--{kind} {name}", builtin(kind).get(name, name)
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(_without_attribute(kind, flag, module_name))
    value = _sent(flag, attribute) if module_name == BY_VALUE else _attribute(flag, module_name, attribute)
    if not callable(value) and not (kind == "task" and _is_task(value)):
        raise UsageError(f"{flag}: {attribute} is a {type(value).__name__}, not a callable {_factory(kind)}")
    return _taken(kind, value, name)


def _attribute(flag: str, module_name: str, attribute: str):
    if "/" in module_name or (Path(module_name).suffix == ".py" and Path(module_name).is_file()):  # a file
        file = Path(module_name)
        raise UsageError(
            f"{flag} names a file, not a module; put its folder on PYTHONPATH and name its module: "
            f"PYTHONPATH={file.parent} dali-launch ... {flag.split()[0]} {file.stem}:{attribute}"
        )
    value = _imported(flag, module_name)
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise UsageError(f"{flag}: module {module_name} has no attribute {attribute}; check the name after ':'")
        value = getattr(value, part)
    return value


def _taken(kind: str, value, name: str):
    """A --KIND target `name` stands for, as the trainer calls it: a DALI-style pipeline function adapted, and the
    call the trainer makes checked against it."""
    if kind == "pipeline":
        value = native.adapted(value, name)
    _check_signature(f"--{kind} {name}", value, kind)
    return value


def described(value) -> str:
    """How messages name a target given as an object: module:qualified name, as --KIND would name it."""
    return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', type(value).__name__)}"


def _sent(flag: str, name: str):
    """The object sent by value as NAME: held here, or unpickled from its run directory (cloudpickle's bytes load
    with plain pickle where cloudpickle is installed: a submitit dependency)."""
    if name not in _held and name in _pickles:
        try:
            _held[name] = pickle.loads(_pickles[name].read_bytes())
        except Exception as e:  # the launcher loaded it in a fresh interpreter before writing it: the place changed
            raise UsageError(
                f"{flag}: {_pickles[name]} does not load here ({type(e).__name__}: {e}); make what it refers to "
                f"importable where the tasks run (PYTHONPATH)"
            ) from None
    if name not in _held:
        raise UsageError(
            f"{flag} names an object the Python API sent by value, which only its own run directory holds "
            f"(objects/{name}.pkl); give {flag.split()[0]} as a built-in name or package.module:attribute"
        )
    return _held[name]


def _imported(flag: str, module_name: str):
    """The module a --model or --pipeline value names, imported; a one-line UsageError where it cannot be."""
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(
            f"{flag}: cannot import {module_name} ({e}); install it or put its folder on PYTHONPATH"
        ) from None
    except Exception as e:  # the module itself is broken: say where, not a traceback
        raise UsageError(f"{flag}: importing {module_name} failed ({type(e).__name__}: {e}); fix that module") from None


def _without_attribute(kind: str, flag: str, module_name: str) -> str:
    """What a value without `:attribute` gets: a module that exists lacks only its factory (or function), and
    the message says how to write it with the module's callables the trainer could call; else it is unknown."""
    try:
        found = bool(module_name) and importlib.util.find_spec(module_name) is not None  # imports its parents only
    except (ImportError, ValueError):
        found = False
    except Exception:  # a parent package that fails on import: _imported says so below
        found = True
    if not found:
        return f"unknown {flag}; use one of {', '.join(builtin(kind))}, or package.module:{_factory(kind)}"
    module, word, call = _imported(flag, module_name), _factory(kind), _CALLS[kind][0]
    names = [key for key, value in vars(module).items() if not key.startswith("_") and _candidate(module, value, kind)]
    more = ", ..." if len(names) > 6 else ""
    said = (
        f"its callables that take {call}: {', '.join(names[:6])}{more}"
        if names
        else f"it has no callable that takes {call}"
    )
    return f"{flag} names a module but no {word} in it; write --{kind} {module_name}:{word.upper()} ({said})"


def _candidate(module, value, kind: str) -> bool:
    """Whether `value`, found in `module`, looks like a --KIND target: its own (or a contract.Pipeline), and
    callable as the trainer calls one."""
    from dali_launch.trainer.data.contract import Pipeline

    own = getattr(value, "__module__", None) == module.__name__ or isinstance(value, Pipeline)
    if not (own and callable(value)):
        return False
    signature = signature_of(native.adapted(value, module.__name__) if kind == "pipeline" else value)
    if signature is None:
        return False
    _, args, kwargs = _call(kind, signature)
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def check(kind: str, name: str, num_classes: int = 10) -> None:
    """What the launcher calls before writing anything: built-in names cost nothing; others are imported,
    and a model factory is called abstractly (jax.eval_shape: nothing computed, no device taken), so a
    broken contract is refused before the run directory exists rather than at the task's start."""
    if name in builtin(kind):
        return
    if kind == "model":
        create_model(name, num_classes)
    else:
        load(kind, name)


def create_model(name: str, num_classes: int, adapter: str | None = None, **options):
    """`--model NAME`, made as model/contract.py says: a flax.linen.Module, or an NNX module presented
    as the trainer calls a Linen one (`adapter`: contract.ADAPTER unless a benchmark names another).
    `options` (model_options) go to a Linen factory that names them as parameters."""
    from dali_launch.trainer.model import contract  # Flax and JAX: only where a model is made

    factory = load("model", name)
    options = {k: v for k, v in options.items() if k in _named(factory)}
    return contract.make(name, factory, num_classes, takes_rngs(factory), adapter or contract.ADAPTER, options)


# [model] settings a model factory may name
MODEL_OPTIONS = ("drop_path", "vit_pool", "attention", "remat", "batchnorm_stats", "pool_grad")


def model_options(model) -> dict:
    """The flags a model factory may take beside num_classes, from the [model] settings (their auto values
    resolved by the task's plan)."""
    return {name: getattr(model, name) for name in MODEL_OPTIONS}


def run_model(spec):
    """The run's model: --model with --num-classes and the model options."""
    return create_model(spec.model.model, spec.data.num_classes, **model_options(spec.model))


def create_task(name: str, **options):
    """`--task NAME`: a tasks.contract.Task as it is, or its factory called with the `options` it names (tasks/
    contract.py's OPTIONS: num_classes, label_smoothing, mixup, cutmix)."""
    value = load("task", name)
    _options_taken(name, value, options)
    if not _is_task(value):
        try:
            value = value(**{k: v for k, v in options.items() if k in _named(value)})
        except UsageError:  # the factory refused an option itself, in its own words
            raise
        except Exception as e:  # the user's factory: one line, where
            raise UsageError(f"--task {name}: its factory raised {type(e).__name__}: {e}; fix the factory") from None
        if not _is_task(value):
            raise UsageError(f"--task {name} returned a {type(value).__name__}, not a Task (tasks/contract.py)")
    return value


def _options_taken(name: str, value, options: dict) -> None:
    """A task option set (not 0) that the task's factory does not name (or any, for a Task as it is) would be
    ignored: refused in one line. --num-classes is every data set's, taken or not."""
    takes = () if _is_task(value) else _named(value)
    for option, setting in options.items():
        if setting and option != "num_classes" and option not in takes:
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"{flag} {setting}: --task {name} does not take {flag}; leave it out")


def task_bringing(pipeline: str) -> str:
    """The built-in task whose own --pipeline is `pipeline`, or "" (what a run of that pipeline should add)."""
    return next((name for name in TASKS if create_task(name).pipeline == pipeline), "")


def task_options(spec) -> dict:
    """The settings a task factory may take: --num-classes and the [task] table's options."""
    from dali_launch.trainer.tasks.contract import OPTIONS

    values = {"num_classes": spec.data.num_classes, **vars(spec.task)}
    return {name: values[name] for name in OPTIONS}


def run_task(spec):
    """The run's task: --task with the options it names."""
    return create_task(spec.task.task, **task_options(spec))


def _is_task(value) -> bool:
    from dali_launch.trainer.tasks.contract import Task

    return isinstance(value, Task)


CONTRACTS = {"model": "docs/models.md", "pipeline": "docs/data.md", "task": "docs/tasks.md"}  # where each is said
_CALLS = {
    "model": ("factory(num_classes=N)", (), {"num_classes": 10}),
    "pipeline": ("function(args)", (None,), {}),
    "task": ("factory(num_classes=N, ...)", (), {"num_classes": 10}),
}


def _check_signature(flag: str, value, kind: str) -> None:
    """The call the trainer will make binds to `value`'s parameters: a TypeError raised by the call
    itself (deep inside DALI's pipeline_def, for a pipeline) would be a traceback."""
    signature = signature_of(value)
    if signature is None or (kind == "task" and _is_task(value)):
        return
    call, args, kwargs = _call(kind, signature)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise UsageError(f"{flag} cannot be called as {call} ({e}); see the contract in {CONTRACTS[kind]}") from None


def _call(kind: str, signature: inspect.Signature) -> tuple[str, tuple, dict]:
    """The call the trainer makes of a `kind` target with `signature`: in words, its arguments, its keywords."""
    call, args, kwargs = _CALLS[kind]
    if kind == "model" and "rngs" in signature.parameters:  # Flax NNX: model/nnx_model.py
        call, kwargs = "factory(num_classes=N, rngs=nnx.Rngs(seed))", {**kwargs, "rngs": None}
    if kind == "task":  # the options it names, each given
        from dali_launch.trainer.tasks.contract import OPTIONS

        kwargs = {name: None for name in OPTIONS if name in signature.parameters}
    return call, args, kwargs


def signature_of(value) -> inspect.Signature | None:
    """What a call of `value` binds to. A class's own __init__ (less `self`): an nnx.Module class's
    metaclass takes (*args, **kwargs) and would hide it. None: some callables (C functions) have none."""
    try:
        if isinstance(value, type):
            signature = inspect.signature(value.__init__)
            return signature.replace(parameters=list(signature.parameters.values())[1:])
        return inspect.signature(value)
    except (TypeError, ValueError):
        return None


def model_takes(name: str, option: str) -> bool:
    """Whether `--model NAME`'s factory is given `option` (one of MODEL_OPTIONS) by naming it."""
    return option in _named(load("model", name))


def _named(factory) -> dict:
    return (signature_of(factory) or inspect.Signature()).parameters


def takes_rngs(factory) -> bool:
    """A model factory that names an `rngs` parameter is called with nnx.Rngs (an NNX constructor is one)."""
    signature = signature_of(factory)
    return signature is not None and "rngs" in signature.parameters


def _factory(kind: str) -> str:
    return {"model": "factory", "pipeline": "function", "task": "task"}[kind]
