"""The one way a config field is declared: its default, its help (the CLI flag's one line), its details (docs/flags.md)
and what `--resume` may do to it."""

from __future__ import annotations

from dataclasses import field


def opt(default, help: str, details: str = "", **meta):
    """A config field whose metadata doubles as its CLI flag (`choices`, `flag` may be given): `help` is the one line
    `--help` shows, `details` what the flags reference (docs/flags.md, `dali-launch config flags`) says besides.

    `on_resume` says what `--resume` lets a flag given beside it do to the run's own value (the launcher
    reads it, launcher/route/resume.py): "may change" (how long or how it runs, never what it computes) or
    "elastic" (where it runs: another topology, either sample order); without it a different value is refused,
    the checkpoint would continue another run. `path=True`: a path, compared (and written) as an absolute one."""
    return field(default=default, metadata={"help": help, "details": details, **meta})
