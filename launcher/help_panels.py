"""`--help` grouped by concern: each settings table's flags under its own heading, with the page that says more
(run_config.Panel: the heading each table's field declares, trainer/settings/fields.py's `table_field`).

Typer draws panels only with Rich, whose boxes double the lines; these commands print click's plain
layout, one group of flags after another (options.py gives every generated flag its panel). Every flag in
full is docs/flags.md (`dali-launch config flags`).
"""

from __future__ import annotations

import typer.core

REFERENCE = "docs/flags.md"


def _format_grouped(command, ctx, formatter) -> None:
    """The command's own options first, then each panel's, in the order the command declares them."""
    groups: dict[str, list] = {}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            groups.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
    for panel, records in groups.items():
        with formatter.section(panel):
            formatter.write_dl(records, col_spacing=2)
    if len(groups) > 1:
        formatter.write_paragraph()
        formatter.write_text(f"Every flag in full: {REFERENCE} (dali-launch config flags).")


class GroupedCommand(typer.core.TyperCommand):
    def format_options(self, ctx, formatter) -> None:
        _format_grouped(self, ctx, formatter)


class GroupedGroup(typer.core.TyperGroup):
    def format_options(self, ctx, formatter) -> None:
        _format_grouped(self, ctx, formatter)
        self.format_commands(ctx, formatter)
