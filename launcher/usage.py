"""What the CLI says when it is asked nothing, asked its version, or given a flag it does not know.

`dali-launch` alone prints the help (a job needs at least one flag: a bare word must never submit one);
`--version` is the package's and, from a checkout, its git revision. A flag unknown to a command is
looked up in every other command: `train --sweep` is told that --sweep is a flag of `dali-launch`
itself, and a near miss is suggested with the command it belongs to (`dali-launch train --seed`).
"""

from __future__ import annotations

import difflib
from importlib import metadata
from pathlib import Path

import typer


def version_line() -> str:
    """`dali-launch 0.1.0`, and `(git 1a2b3c4, modified)` when this runs from a checkout."""
    from dali_launch.trainer.observe.manifest import git_revision

    try:
        version = metadata.version("dali-launch")
    except metadata.PackageNotFoundError:
        version = "unknown"
    git = git_revision(Path(__file__).resolve().parent)  # a tracked folder of ours: launcher/
    where = f" (git {git['revision'][:10]}{', modified' if git.get('dirty') else ''})" if git else ""
    return f"dali-launch {version}{where}"


def show_version(value: bool) -> None:
    """--version's callback: says it and ends the command before anything else is parsed or run."""
    if value:
        typer.echo(version_line())
        raise typer.Exit(0)


def flags_by_command(app) -> dict[str, list[str]]:
    """Every command's path (`dali-launch train`, `dali-launch data synth`) -> its flags."""
    out: dict[str, list[str]] = {}

    def walk(command, path: str) -> None:
        out[path] = [o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "dali-launch")
    return out


def unknown_flag(app, flag: str, command: str) -> str:
    """The one line for `flag`, unknown to `command` (its path): where it lives, or what it was near."""
    flags = flags_by_command(app)
    elsewhere = [path for path, names in flags.items() if flag in names and path != command]
    if elsewhere:
        where = ", ".join(
            f"`{path}`" + (" (with no command)" if path == "dali-launch" else "") for path in elsewhere[:3]
        )
        return f"no such option for `{command}`: {flag}; it is a flag of {where}: {elsewhere[0]} {flag} ..."
    near = difflib.get_close_matches(flag, flags.get(command, []), n=2, cutoff=0.75)
    if not near:  # a near miss of another command's flag
        near_elsewhere = [
            (path, name)
            for path, names in flags.items()
            for name in difflib.get_close_matches(flag, names, n=1, cutoff=0.75)
        ]
        if near_elsewhere:
            path, name = near_elsewhere[0]
            return f"no such option for `{command}`: {flag}; did you mean `{path} {name}`?"
        return f"No such option: {flag}; see dali-launch --help"
    return f"no such option for `{command}`: {flag}; did you mean {' or '.join(f'`{command} {n}`' for n in near)}?"
