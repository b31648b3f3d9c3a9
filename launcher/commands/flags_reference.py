"""`dali-launch config flags`: every flag in full, as Markdown; docs/flags.md is its output (a test keeps them equal).

`--help` shows one line per flag; the fields' `details` (trainer/settings/fields.py's `opt`) say the rest here,
grouped as `--help` groups them, each with the --config table and key that set it too.
"""

from __future__ import annotations

import dataclasses

import typer

from dali_launch.launcher.config_file import table_name
from dali_launch.launcher.options import flag_fields
from dali_launch.launcher.route.sweep import SWEEPS, SweepConfig
from dali_launch.launcher.run_config import RUN_OPTIONS

INTRO = """# Every flag

[← README](../README.md)

`dali-launch --help` and `dali-launch train --help` give one line per flag, grouped as below; this page
gives each in full. Every flag is also a key of a `--config FILE.toml` table (`[data] pipeline = "folders"`),
and a run directory's `config.toml` holds them all. This page is the output of `dali-launch config flags`.
"""


def flags() -> None:
    """Print every flag in full, with its default and its --config table and key, as Markdown."""
    typer.echo(reference(), nl=False)


def reference() -> str:
    parts = [INTRO]
    for panel in (*RUN_OPTIONS, SWEEPS):
        page = panel.page
        parts.append(
            f"\n## {panel.title}\n\n" + (f"More in [{page}]({page.removeprefix('docs/')}).\n\n" if page else "")
        )
        parts += [_entry(cls, field, kind) + "\n" for cls, field, kind in flag_fields(panel.classes)]
    return "".join(parts)


def _entry(cls: type, field: dataclasses.Field, kind: type) -> str:
    """One flag: its name, default and table key, then what it does."""
    meta, flag = field.metadata, "--" + field.name.replace("_", "-")
    text = meta.get("details") or meta["help"]
    aliases = "".join(f", `{alias}`" for alias in meta.get("aliases", ()))
    where = "" if cls is SweepConfig else f"; `[{table_name(cls)}] {field.name}`"
    return f"- **`{flag}`**{aliases} ({_default(field, kind)}{where}): {text}"


def _default(field: dataclasses.Field, kind: type) -> str:
    if field.default is dataclasses.MISSING:
        return "repeatable"
    value = field.default
    if value is None or value == "":
        return "unset by default"
    if kind is bool:
        return f"default: {'on' if value else 'off'}"
    return f"default: `{value}`"
