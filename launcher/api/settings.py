"""The Python API's settings: the CLI's, by field name (the fields options.py makes the flags of), as keywords.

Each is checked as the CLI checks its flag, in one line: an unknown name (with the name it was near, or the mode
whose setting it is), a value of the wrong type, a choice that is none of the field's. `processes` is
`tasks_per_node`, as --processes is; a path may be a pathlib.Path; `config` is a --config file; `model`, `pipeline`
and `task` may be Python objects (api/objects.py). Where a run goes is the Executor's mode, not a setting.
"""

from __future__ import annotations

import difflib
import os
import typing

from dali_launch.launcher.api.modes import MODES
from dali_launch.launcher.options import default_of, flag_fields
from dali_launch.trainer.errors import UsageError

OBJECTS = ("model", "pipeline", "task")  # settings that may be Python objects as well as the CLI's strings
CONFIG = "config"  # a --config FILE.toml
REFUSED = {
    "local": "local: the Executor's mode says where a run goes; use Executor('local', ...)",
    "resume": "resume: the Python API starts new runs; continue one with `dali-launch --resume RUN`",
    "dry_run": "dry_run: the Python API starts runs; see what one would run with `dali-launch ... --dry-run`",
}
WANT = {bool: "True or False", int: "an int", float: "a number", str: "a str", list: "a list of str"}


def classes(mode: str) -> list[type]:
    return [cls for panel in MODES[mode][1] for cls in panel.classes]


def fields_of(mode: str) -> dict[str, tuple]:
    """Setting name -> (its field, its type), for every flag of `mode`."""
    return {field.name: (field, kind) for _, field, kind in flag_fields(classes(mode))}


def aliases(mode: str) -> dict[str, str]:
    """A flag's other names as keywords (`processes`) -> the field's."""
    return {
        alias.lstrip("-").replace("-", "_"): name
        for name, (field, _) in fields_of(mode).items()
        for alias in field.metadata.get("aliases", ())
    }


def defaults(mode: str) -> dict:
    """Every setting of `mode` at its default, as the CLI's flags are when not given."""
    return {name: default_of(field) for name, (field, _) in fields_of(mode).items()}


def checked(mode: str, settings: dict) -> dict:
    """`settings` by field name, each value checked (an object where one is allowed is left to api/objects.py)."""
    known, out = fields_of(mode), {}
    for given, value in settings.items():
        name = _name(mode, given)
        if name == CONFIG:
            out[name] = _value(name, value, None, str)
        elif name in OBJECTS and not isinstance(value, str):
            out[name] = value
        else:
            out[name] = _value(name, value, *known[name])
    return out


def check_file(mode: str, values: dict, config: str | None) -> None:
    """What a --config file may not say to the Python API: where a run goes (the mode's), or a resume, or a dry
    run, each one line as if it had been given as a keyword."""
    if config is None:
        return
    if values.get("local") != (mode == "local"):
        raise UsageError(f"--config {config} sets local = {str(values['local']).lower()}; {REFUSED['local']}")
    for name in ("resume", "dry_run"):
        if values.get(name):
            raise UsageError(f"--config {config} sets {name}; {REFUSED[name]}")


def _name(mode: str, name: str) -> str:
    """The field `name` stands for, or a one-line UsageError: refused, another mode's, or near another name."""
    known, other_names = fields_of(mode), aliases(mode)
    if name in REFUSED:
        raise UsageError(REFUSED[name])
    if name in known or name == CONFIG:
        return name
    if name in other_names:
        return other_names[name]
    elsewhere = [other for other in MODES if other != mode and name in fields_of(other)]
    if elsewhere:
        raise UsageError(
            f"{name} is a SLURM setting: Executor({elsewhere[-1]!r}) takes it, Executor({mode!r}) does not"
        )
    close = difflib.get_close_matches(name, [*known, *other_names, CONFIG], n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else "settings are the CLI's flags, `_` for `-` (batch_size)"
    raise UsageError(f"Executor({mode!r}) has no setting {name}; {hint}")


def _value(name: str, value, field, kind):
    """`value` if it fits the field's type, made what the CLI's flag gives (a path a str, an int a float where a
    float is due, a node count a str), else a one-line UsageError with an example."""
    args = typing.get_args(kind)
    optional = type(None) in args
    base = next(a for a in args if a is not type(None)) if optional else kind
    origin = typing.get_origin(base) or base
    if value is None and optional:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is str and isinstance(value, os.PathLike):
        value = os.fspath(value)
    elif origin is str and field is not None and field.metadata.get("int_ok") and isinstance(value, int) and number:
        value = str(value)  # --nodes 2
    elif origin is float and number:
        value = float(value)
    elif origin is list and isinstance(value, tuple):
        value = list(value)
    fits = isinstance(value, origin) and not (origin in (int, float) and isinstance(value, bool))
    if not fits or (origin is list and not all(isinstance(v, str) for v in value)):
        example = default_of(field) if field is not None else "run.toml"
        example = (
            example
            if example not in (None, [])
            else {bool: True, int: 1, float: 0.5, str: "...", list: ["..."]}[origin]
        )
        none = " or None" if optional else ""
        raise UsageError(f"{name}={value!r} is {a_type(value)}; give {WANT[origin]}{none}, e.g. {name}={example!r}")
    choices = field.metadata.get("choices") if field is not None else None
    if choices and value not in choices:
        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
        raise UsageError(
            f"{name}={value!r} is not one of {', '.join(choices)}" + (f"; did you mean {close[0]!r}?" if close else "")
        )
    return value


def a_type(value) -> str:
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
