"""`--config FILE.toml`: any flag, in a TOML file; and the TOML a run's configuration is saved as.

    [model]                       # tables: RunConfig's fields (launch, slurm, data, model, step, ...)
    model = "cnn"                 # keys: field names, i.e. the flag without its dashes, `_` for `-`
    [step]
    epochs = 3
    [data]
    data_dir = "/data/fashion"    # relative paths are taken from where dali-launch runs, as for flags

An earlier version kept the model, step, optimizer, task, eval and xla keys in one [train] table: such a
file still loads, its keys read from the tables that hold them now (as an old config.json is: trainer/config.py).
Precedence: defaults < the file < flags given on the command line. TOML has no null: a key left
out keeps its default. `dali-launch config show [flags]` prints the result in this format, and every
run directory holds its own as config.toml, so `--config RUN_DIR/config.toml` repeats a run.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.config import Layout, tables_of_keys
from dali_launch.trainer.errors import UsageError

LEGACY = "train"  # an earlier version's one table of the keys now in [model], [step], [optimizer], ...
_WANT = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a quoted string",
    list: "a list of quoted strings",
}


def table_name(cls: type) -> str:
    """The table of a config class: its RunConfig field's name (LaunchConfig -> launch), or CiConfig -> ci."""
    for f in dataclasses.fields(RunConfig):
        if f.type == cls.__name__ or f.type is cls:
            return f.name
    return cls.__name__.removesuffix("Config").lower()


def settings(classes) -> dict[str, dict[str, dataclasses.Field]]:
    """table -> key -> field: what a file may set (fields hidden from the CLI are not settable)."""
    run_classes = [typing.get_type_hints(RunConfig)[f.name] for f in dataclasses.fields(RunConfig)]
    return {
        table_name(cls): {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("flag", "") is not None}
        for cls in dict.fromkeys([*run_classes, *classes])
    }


def load(path: str, classes=()) -> dict:
    """The file's settings as {field name: value}, each checked: table, key, type, choice."""
    where = f"--config {path}"
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise UsageError(f"{where} cannot be read ({e.strerror}); give an existing TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where} is not valid TOML ({e}); fix that line") from None
    except UnicodeDecodeError as e:  # TOML is UTF-8 only; tomllib decodes before it parses
        line = e.object[: e.start].count(b"\n") + 1
        raise UsageError(
            f"{where} is not UTF-8 text (byte 0x{e.object[e.start]:02x} in line {line}); save it as UTF-8"
        ) from None
    known, values = settings(classes), {}
    types = {table: type_of(table, classes) for table in known}
    for table, content in data.items():
        if not isinstance(content, dict):
            homes = [t for t, keys in known.items() if table in keys]
            fix = f"put it under [{homes[0]}]" if homes else f"settings sit in tables: {_tables(known)}"
            raise UsageError(f"{where}: {table} is outside any table; {fix}")
        if table not in known and table != LEGACY:
            close = difflib.get_close_matches(table, list(known), n=1, cutoff=0.6)
            fix = f"did you mean [{close[0]}]?" if close else f"tables are {_tables(known)}"
            raise UsageError(f"{where}: unknown table [{table}]; {fix}")
        for key, value in content.items():
            home = tables_of_keys().get(key, table) if table == LEGACY else table  # an old [train]: the key's table
            if key not in known.get(home, {}):
                raise UsageError(
                    f"{where}: unknown key {key} in [{table}]{_key_fix(key, home, types.get(home), known)}"
                )
            kind = typing.get_type_hints(types[home])[key]
            values[key] = _checked(f"{where}: [{table}] {key}", known[home][key], kind, value)
    return values


def type_of(table: str, classes=()) -> type:
    run_hints = typing.get_type_hints(RunConfig)
    return run_hints[table] if table in run_hints else next(c for c in classes if table_name(c) == table)


def _tables(known: dict) -> str:
    return " ".join(f"[{t}]" for t in known)


def _guess(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _key_fix(key: str, table: str, cls: type, known: dict) -> str:
    homes = [t for t, keys in known.items() if key in keys]
    if homes:
        return f"; {key} belongs in [{homes[0]}]"
    hidden = {f.name for f in dataclasses.fields(cls)} if cls else set()
    if key in hidden | {f.name for f in dataclasses.fields(Layout)}:
        return f"; dali-launch sets {key} itself, leave it out"
    keys = known.get(table) or tables_of_keys()  # an old [train] table: every key it could hold
    return _guess(key, keys) or f"; keys of [{table}] are {', '.join(keys)}"


def _checked(where: str, field: dataclasses.Field, kind, value):
    """`value` if it fits the field's type (an int where a float is due counts), else a UsageError."""
    args = typing.get_args(kind)
    base = next(a for a in args if a is not type(None)) if type(None) in args else kind
    origin = typing.get_origin(base) or base
    if origin is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if origin is str and field.metadata.get("int_ok") and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # --nodes: a count (2) or a range ("1-2")
    fits = isinstance(value, origin) and not (origin is int and isinstance(value, bool))
    if origin is list:
        fits = fits and all(isinstance(v, str) for v in value)
    if not fits:
        example = field.default if field.default not in (None, dataclasses.MISSING) else _example(origin)
        raise UsageError(
            f"{where} = {dumps_value(value)} is {_kind(value)}; write {_WANT[origin]}, "
            f"e.g. {field.name} = {dumps_value(example)}"
        )
    choices = field.metadata.get("choices")
    if choices and value not in choices:
        raise UsageError(f"{where} = {dumps_value(value)} is not one of {', '.join(choices)}{_guess(value, choices)}")
    return value


def _example(origin: type):
    return {bool: True, int: 1, float: 0.5, str: "...", list: ["..."]}[origin]


def _kind(value) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
    return next((name for t, name in names.items() if isinstance(value, t)), f"a {type(value).__name__}")


def dumps(run: RunConfig) -> str:
    """`run` as a --config file: every settable field; unset (None) ones as comments, TOML having no null."""
    lines = []
    for table, keys in settings(()).items():
        lines.append(f"[{table}]")
        for key in keys:
            value = getattr(getattr(run, table), key)
            lines.append(f"# {key} is unset" if value is None else f"{key} = {dumps_value(value)}")
        lines.append("")
    return "\n".join(lines)


def dumps_value(value) -> str:
    """One TOML value. JSON's string escapes are TOML's, except DEL, which TOML wants escaped too."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(dumps_value(v) for v in value) + "]"
    return json.dumps(str(value))
