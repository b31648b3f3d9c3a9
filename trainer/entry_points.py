"""What the three loaders share (model/registry.py, tasks/registry.py, data/registry.py): a `--model`, `--pipeline`
or `--task` value is a built-in name, `package.module:attribute` of the user's own, or `<run>:NAME`.

    dali-launch train --model cnn                                    # built-in
    dali-launch train --model mypkg.models:build --pipeline mypkg.pipe:make --data-dir DIR
    dali-launch train --task mypkg.tasks:regression --model mypkg.models:build --pipeline mypkg.pipe:make

The module must be importable where the tasks run: installed, or its folder on PYTHONPATH (local
tasks inherit the environment; sbatch exports it by default). An object the Python API sent by value
(defined in a notebook or in __main__: launcher/route/sent_objects.py) is named `<run>:NAME` and held by the
submission that sent it (`Sent`): in the launcher the object itself, in a task the run directory's
objects/NAME.pkl (`Sent.read`). Each kind is a `Kind` record its registry fills (its built-in table, the call
the trainer makes of a target, how it adapts one); what the target must be is documented where it is used:
model/models.py (a model factory), data/contract.py (a pipeline function), tasks/contract.py (a Task or its
factory). This module imports nothing heavy, so the launcher checks built-in names without starting JAX.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.errors import UsageError

BY_VALUE = "<run>"  # the "module" of an object sent by value: `<run>:NAME` is RUN_DIR/objects/NAME.pkl


@dataclass(frozen=True)
class Kind:
    """What one loader loads: its flag's name, its built-in table and its contract."""

    name: str  # model, pipeline or task: --NAME
    word: str  # what a target is called: factory, function, task
    contract: str  # the docs page that says what a target must be
    builtin: Callable[[], dict[str, str]]  # built-in name -> "module:attribute"
    call: Callable[[inspect.Signature], tuple[str, tuple, dict]]  # the call made of a target: words, args, keywords
    adapt: Callable[[object, str], object] = lambda value, name: value  # a target as the trainer calls it
    whole: Callable[[object], bool] = lambda value: False  # a target that is no callable: taken as it is
    own: Callable[[object], bool] = lambda value: False  # a target defined elsewhere that counts as a module's own


class Sent:
    """The objects one submission sent by value, by NAME: the sender's own objects (`hold`), or in a task the
    pickles of its run directory, each unpickled when first named (so a model's Flax and JAX are imported where a
    model is made). Two submissions in one process hold their own: neither sees the other's."""

    def __init__(self):
        self._held: dict[str, object] = {}
        self._pickles: dict[str, Path] = {}

    def hold(self, name: str, value) -> str:
        """`value`, sent under `name` (before its run directory exists): the reference that names it, `<run>:NAME`."""
        self._held[name] = value
        return f"{BY_VALUE}:{name}"

    def forget(self) -> None:
        """Nothing held any more: another submission's objects are not this one's."""
        self._held.clear()
        self._pickles.clear()

    def read(self, objects: Path) -> Sent:
        """This holder with what a run directory's objects/ folder holds (run_dir.RunPaths.objects), in place of
        what it held under the same names."""
        for path in sorted(Path(objects).glob("*.pkl")):
            self._held.pop(path.stem, None)
            self._pickles[path.stem] = path
        return self

    def get(self, flag: str, name: str):
        """The object sent as NAME (cloudpickle's bytes load with plain pickle where cloudpickle is installed: a
        submitit dependency)."""
        if name not in self._held and name in self._pickles:
            try:
                self._held[name] = pickle.loads(self._pickles[name].read_bytes())
            except Exception as e:  # the launcher loaded it in a fresh interpreter before writing it: the place changed
                raise UsageError(
                    f"{flag}: {self._pickles[name]} does not load here ({type(e).__name__}: {e}); make what it refers "
                    f"to importable where the tasks run (PYTHONPATH)"
                ) from None
        if name not in self._held:
            raise UsageError(
                f"{flag} names an object the Python API sent by value, which only its own run directory holds "
                f"(objects/{name}.pkl); give {flag.split()[0]} as a built-in name or package.module:attribute"
            )
        return self._held[name]


SUBMISSION = Sent()  # what a caller that passes no holder gets: the launcher's submission under way (one at a time)


def load(kind: Kind, name, sent: Sent | None = None):
    """The target `name` stands for, as the trainer calls it, or a one-line UsageError with the fix. `name` may be
    the object itself (a Python caller's): taken as it is; `<run>:NAME` is one `sent` holds."""
    if not isinstance(name, str):
        return _taken(kind, name, described(name))
    flag, target = f"--{kind.name} {name}", kind.builtin().get(name, name)
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(_without_attribute(kind, flag, module_name))
    if module_name == BY_VALUE:
        value = (sent or SUBMISSION).get(flag, attribute)
    else:
        value = _attribute(flag, module_name, attribute)
    if not callable(value) and not kind.whole(value):
        raise UsageError(f"{flag}: {attribute} is a {type(value).__name__}, not a callable {kind.word}")
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


def _taken(kind: Kind, value, name: str):
    """A target `name` stands for, adapted as the trainer calls it, and that call checked against it: a TypeError
    raised by the call itself (deep inside DALI's pipeline_def, for a pipeline) would be a traceback."""
    value = kind.adapt(value, name)
    signature = signature_of(value)
    if signature is None or kind.whole(value):
        return value
    said, args, kwargs = kind.call(signature)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise UsageError(
            f"--{kind.name} {name} cannot be called as {said} ({e}); see the contract in {kind.contract}"
        ) from None
    return value


def described(value) -> str:
    """How messages name a target given as an object: module:qualified name, as --KIND would name it."""
    return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', type(value).__name__)}"


def _imported(flag: str, module_name: str):
    """The module a --KIND value names, imported; a one-line UsageError where it cannot be."""
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(
            f"{flag}: cannot import {module_name} ({e}); install it or put its folder on PYTHONPATH"
        ) from None
    except Exception as e:  # the module itself is broken: say where, not a traceback
        raise UsageError(f"{flag}: importing {module_name} failed ({type(e).__name__}: {e}); fix that module") from None


def _without_attribute(kind: Kind, flag: str, module_name: str) -> str:
    """What a value without `:attribute` gets: a module that exists lacks only its factory (or function), and
    the message says how to write it with the module's callables the trainer could call; else it is unknown."""
    try:
        found = bool(module_name) and importlib.util.find_spec(module_name) is not None  # imports its parents only
    except (ImportError, ValueError):
        found = False
    except Exception:  # a parent package that fails on import: _imported says so below
        found = True
    if not found:
        return f"unknown {flag}; use one of {', '.join(kind.builtin())}, or package.module:{kind.word}"
    module, call = _imported(flag, module_name), kind.call(inspect.Signature())[0]
    names = [key for key, value in vars(module).items() if not key.startswith("_") and _candidate(kind, module, value)]
    more = ", ..." if len(names) > 6 else ""
    said = (
        f"its callables that take {call}: {', '.join(names[:6])}{more}"
        if names
        else f"it has no callable that takes {call}"
    )
    return f"{flag} names a module but no {kind.word} in it; write --{kind.name} {module_name}:{kind.word.upper()} ({said})"


def _candidate(kind: Kind, module, value) -> bool:
    """Whether `value`, found in `module`, looks like a --KIND target: its own (or one the kind counts so), and
    callable as the trainer calls one."""
    own = getattr(value, "__module__", None) == module.__name__ or kind.own(value)
    if not (own and callable(value)):
        return False
    signature = signature_of(kind.adapt(value, module.__name__))
    if signature is None:
        return False
    _, args, kwargs = kind.call(signature)
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


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


def named(factory) -> dict:
    """The parameters `factory` names (none where it has no signature)."""
    return (signature_of(factory) or inspect.Signature()).parameters
