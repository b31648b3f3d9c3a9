"""Config dataclasses are the CLI: every field becomes a `--flag` with the field's help.

Typer reads a command's parameters from its signature, so `config_options` gives the wrapped
command a signature built from the dataclass fields and hands it the values as one dict. Each
such command also takes `--config FILE.toml` (config_file.py): a flag that click reports as
given on the command line wins over the file, the file over the defaults (`settled`, which the
Python API's keywords go through too: launcher/api/).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import typing
from typing import Annotated

import typer


def flag_fields(classes) -> list[tuple[type, dataclasses.Field, type]]:
    """(class, field, its type) of every field of `classes` that is a flag (and a key of --config files)."""
    out = []
    for cls in classes:
        hints = typing.get_type_hints(cls)
        out += [(cls, f, hints[f.name]) for f in dataclasses.fields(cls) if f.metadata.get("flag", "") is not None]
    return out


def _parameter(field: dataclasses.Field, kind: type, panel: str, hidden: bool = False) -> inspect.Parameter:
    meta = field.metadata
    flag = "--" + field.name.replace("_", "-")
    names = [flag, *meta.get("aliases", ())]
    if kind is bool:
        names = [f"{flag}/--no-{flag[2:]}"]
    metavar = meta.get("metavar") or ("TEXT" if typing.get_origin(kind) is list else None)  # not "<list[str]>"
    # A switch says its default in its own name (--no-x): "[default: no-x]" would only repeat it
    option = typer.Option(
        *names,
        help=meta.get("help"),
        rich_help_panel=panel,
        show_default=kind is not bool,
        metavar=metavar,
        hidden=hidden,
    )
    base = typing.get_args(kind)[0] if type(None) in typing.get_args(kind) else kind
    default = default_of(field)
    if "choices" in meta:  # Typer lists an Enum's values as the allowed choices
        base = enum.Enum(field.name, {c: c for c in meta["choices"]}, type=str)
        default = base(default)
    annotation = Annotated[base | None if base is not kind else kind, option]
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def config_options(*groups, hidden: tuple[str, ...] = ()):
    """Decorates `command(values: Values, **own)`: adds one flag per field of each group's classes (a group is a
    run_config.Panel: its flags under its heading); those named in `hidden` (field names) stay out of its --help:
    the command takes them only to refuse them, or not at all."""

    def wrap(command):
        hints = typing.get_type_hints(command, include_extras=True)  # resolve `from __future__` strings
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in list(inspect.signature(command).parameters.values())[1:]
        ]
        generated = [
            _parameter(f, kind, group.heading, f.name in hidden)
            for group in groups
            for _, f, kind in flag_fields(group.classes)
        ]
        names = {p.name for p in generated}
        classes = [cls for group in groups for cls in group.classes]
        # Typer hands the context to one parameter only: the command's own, if it has one.
        own_context = next((p.name for p in own if p.annotation is typer.Context), None)

        @functools.wraps(command)
        def wrapper(**kwargs):
            ctx = kwargs[own_context] if own_context else kwargs.pop(_CONTEXT.name)
            path = kwargs.pop(_CONFIG.name)
            flags = {k: _plain(kwargs.pop(k)) for k in list(kwargs) if k in names}
            # Typer vendors click (typer._click): compare ParameterSource by name, not by class.
            given = {k for k in flags if ctx.get_parameter_source(k).name != "DEFAULT"}
            return command(settled(flags, given, path, classes), **kwargs)

        wrapper.__signature__ = inspect.Signature(own + [_CONFIG] + generated + ([] if own_context else [_CONTEXT]))
        return wrapper

    return wrap


_CONFIG = inspect.Parameter(
    "config_file",
    inspect.Parameter.KEYWORD_ONLY,
    default=None,
    annotation=Annotated[
        str | None,
        typer.Option(
            "--config",
            metavar="FILE.toml",
            help=(
                "Settings from a TOML file: a table per group ([data], [step]...), keys named like the flags "
                "(batch_size = 64); flags given here win. `dali-launch config show` prints one."
            ),
        ),
    ],
)
_CONTEXT = inspect.Parameter("click_context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)


class Values(dict):
    """Field name -> value, and `given`: the names set by a flag or the --config file (not defaults)."""

    given: set[str] = frozenset()


def settled(values: dict, given: set[str], config_path: str | None, classes) -> Values:
    """A command's settings: `values` (every field's, defaults included) of which `given` were asked for, with a
    --config file between them and the defaults: defaults < the file < given. The CLI's flags come through here
    (config_options) and so do the Python API's keywords, so both make the same run of the same settings."""
    settings = Values(values)
    settings.given = set(given)
    if config_path is not None:
        from dali_launch.launcher import config_file

        from_file = {k: v for k, v in config_file.load(config_path, classes).items() if k in settings}
        settings |= {k: v for k, v in from_file.items() if k not in settings.given}
        settings.given |= set(from_file)
    return settings


def default_of(field: dataclasses.Field):
    """A field's default value (a fresh one where it has a factory: a list)."""
    return field.default if field.default is not dataclasses.MISSING else field.default_factory()


def _plain(value):
    return value.value if isinstance(value, enum.Enum) else value


def build(cls, values: dict):
    """The dataclass `cls` from flag values (nested dataclass fields are built recursively)."""
    kwargs = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = build(hints[f.name], values)
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)
