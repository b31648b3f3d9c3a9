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


def table_field(default, panel: str, page: str, swept: bool = True, was_in_train: bool = False):
    """A table of a run's settings (a field whose value is one of the dataclasses above), declared once with what
    the launcher shows of it: `panel`, its flags' heading in --help and docs/flags.md, and `page`, the docs page
    that heading names. `swept`: a --sweep may vary its keys (the job's shape may not). `was_in_train`: an earlier
    version kept its keys in one flat `train` table, which old run directories and --config files still hold."""
    meta = {"panel": panel, "page": page, "swept": swept, "was_in_train": was_in_train}
    return field(default=default, metadata=meta)
