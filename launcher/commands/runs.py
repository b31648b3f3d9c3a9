"""`dali-launch runs [ROOT]`: every run directory under ROOT, one row each, from its files and its job;
every sweep under ROOT, one row, followed by its points.

The state is the run's job handle's (backends/job.py), the one vocabulary of `status` and `sweep status`:
pending, running, finished, interrupted (a signal stopped it after a checkpoint: --resume continues it),
cancelled, failed (a rank raised, a watchdog gave up, or it died without a word), not started; a failed
or interrupted run's row says why (its ranks' endings: backends/job.why_ended).
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer

WHY_WIDTH = 70  # of the table's why column at most; --json has it whole
COLUMNS = ("run", "state", "mode", "topology", "epochs", "best", "last", "images/s", "wall time", "why")
# In a narrow terminal the table keeps these first, in this order, and drops the rest (the why column shortened
# first): a row stays one line, and the run's name, which `status`, `logs` and `--resume` take, is never cut.
KEPT_FIRST = ("run", "state", "epochs", "best", "topology", "images/s", "wall time", "last", "mode")
SCORES = ("best", "last")  # the headline's columns: headed by its name where every run listed shares one
WHY_SHOWN = 30  # a failed run's why: columns of KEPT_FIRST are dropped to leave it this much
MIN_WHY = 12  # narrower than this, the why column is left out (`status RUN` says it whole)
COLOURS = {
    "pending": "cyan",
    "running": "cyan",
    "finished": "green",
    "interrupted": "yellow",
    "cancelled": "yellow",
    "failed": "red",
    "not started": "white",
}


def runs(
    root: Annotated[str, typer.Argument(help="Folder holding the run directories.")] = "runs",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list of the rows instead of a table.")] = False,
    prune: Annotated[
        bool, typer.Option("--prune", help="Delete the runs the selectors choose (a dry run without --yes).")
    ] = False,
    failed: Annotated[bool, typer.Option("--failed", help="--prune: runs that failed.")] = False,
    older_than: Annotated[
        str | None, typer.Option(help="--prune: runs that last wrote this long ago (30m, 12h, 7d, 2w).")
    ] = None,
    keep: Annotated[int | None, typer.Option(help="--prune: all but the N newest runs.")] = None,
    run: Annotated[
        list[str] | None, typer.Option("--run", help="--prune: this run too, even resumable (repeatable).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="--prune: delete, rather than say what would go.")] = False,
):
    """Every run under ROOT: state (running, finished, failed, interrupted, ...), mode, topology, epochs, its task's
    headline (the best epoch's by its direction, and the last), speed.
    With --prune, run directories deleted instead: never a live run, nor a resumable one --run does not name."""
    check_root(root)
    selectors = _selectors(prune, failed, older_than, keep, run, yes, as_json)
    if selectors:
        from dali_launch.launcher.commands.prune import prune as delete

        delete(Path(root), selectors, yes, typer.echo)
        return
    rows = collect(Path(root))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    elif not rows:
        typer.echo(f"no runs under {Path(root).absolute()}")
    else:
        from rich.console import Console

        console = Console()
        # Piped or in a log (COLUMNS unset), Rich would squeeze the table into 80 columns: it gets what it needs.
        width = console.width if console.is_terminal or os.environ.get("COLUMNS", "").isdigit() else None
        out = table(rows, width)
        Console(width=max(width or 0, _table_width([c.width for c in out.columns]))).print(out)


def _selectors(prune: bool, failed, older_than, keep, run, yes: bool, as_json: bool):
    """--prune's selectors, or None without --prune (a selector without it is refused: it deletes nothing)."""
    from dali_launch.launcher.commands.prune import Selectors
    from dali_launch.trainer.errors import UsageError

    given = {"--failed": failed, "--older-than": older_than, "--keep": keep is not None, "--run": run, "--yes": yes}
    if not prune:
        flag = next((flag for flag, value in given.items() if value), None)
        if flag:
            raise UsageError(
                f"{flag} chooses what `dali-launch runs --prune` deletes; add --prune, or leave {flag} out"
            )
        return None
    if as_json:
        raise UsageError("--json lists runs, --prune deletes them; give one of them")
    return Selectors(failed, older_than, keep, tuple(run or ()))


def check_root(root: str) -> None:
    """ROOT is a folder: a mistyped one is said, not listed as empty."""
    from dali_launch.trainer.errors import UsageError

    folder = Path(root).absolute()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise UsageError(
            f"ROOT {folder} {what}; give the folder that holds the run directories (the runs' --run-root, "
            f"default runs/ where they were started)"
        )


def collect(root: Path) -> list[dict]:
    """Rows of every run directory (a folder holding config.json) right under `root`, oldest first, and of
    every sweep there (a folder holding sweep.json): its own row, then one per point (kind "point")."""
    from dali_launch.trainer.errors import UsageError
    from dali_launch.trainer.run_dir import RunPaths, note

    folders = sorted(root.iterdir()) if root.is_dir() else []
    rows = []
    for folder in folders:
        if (folder / "config.json").is_file():
            rows.append(describe(RunPaths(folder)))
        elif (folder / "sweep.json").is_file():
            try:
                rows += sweep_rows(folder)
            except UsageError as e:  # its sweep.json damaged: the rest is listed, and this said on stderr
                note(folder / "sweep.json", str(e).removeprefix(f"{folder / 'sweep.json'} "))
    return rows


def sweep_rows(folder: Path) -> list[dict]:
    """A sweep's row (its points' states counted) and its points' rows, named SWEEP/POINT."""
    from dali_launch.launcher.route import sweep
    from dali_launch.trainer.run_dir import RunPaths

    record = sweep.load(folder)
    points = [
        {**describe(RunPaths(p["run_dir"])), "kind": "point", "run": f"{folder.name}/{Path(p['run_dir']).name}"}
        for p in record["points"]
        if (Path(p["run_dir"]) / "config.json").is_file()
    ]
    states = collections.Counter(p["state"] for p in points)
    return [
        {
            "kind": "sweep",
            "run": folder.name,
            "path": str(folder),
            "state": ", ".join(f"{n} {s}" for s, n in sorted(states.items())),
            "points": len(record["points"]),
            "axes": record["axes"],
        },
        *points,
    ]


def describe(paths) -> dict:
    """One run's row: what it is, how far it got, how well and how fast."""
    from dali_launch.launcher.backends import registry
    from dali_launch.launcher.backends.job import last_write, spec_of, why_ended
    from dali_launch.trainer.run_dir import best, better, headline, read_json, read_jsonl

    job, spec = registry.attach(paths), spec_of(paths)  # damaged files: noted, and said on stderr
    launch = read_json(paths.launch, {})
    epochs = read_jsonl(paths.metrics)
    scored = [m for m in epochs if headline(m)[1] is not None]  # evaluated: the task's headline value
    top, last = best(scored), scored[-1] if scored else {}
    state = job.state()
    started = paths.launch.stat().st_mtime if paths.launch.exists() else paths.config.stat().st_mtime
    ended = time.time() if state.live else last_write(paths)
    return {
        "kind": "run",
        "run": paths.root.name,
        "path": str(paths.root),
        "state": str(state),
        "why": why_ended(paths, state),
        "mode": spec.layout.backend if spec else None,
        "nodes": _nodes(paths, launch.get("nodes", 1)),
        "processes": job.num_tasks,
        "devices_per_process": spec.layout.local_device_count if spec else None,
        "epochs_done": len(epochs),
        "epochs": spec.step.epochs if spec else None,
        "headline": headline(last)[0] if scored else None,  # its name: accuracy, miou, ap50, bit error...
        "better": better(last) if scored else None,  # which way it improves: higher, lower
        "best": headline(top)[1] if top else None,
        "best_epoch": top.get("epoch") if top else None,
        "last": headline(last)[1] if scored else None,
        "images_per_s": epochs[-1].get("images_per_s") if epochs else None,
        "wall_time_s": max(0.0, ended - started),
    }


def _nodes(paths, given) -> int:
    """The nodes of the run's latest start: as given, or SLURM's pick from a --nodes range (rank_map.json)."""
    from dali_launch.trainer.run_dir import read_json

    if str(given).isdigit():
        return int(given)
    try:
        return int(read_json(paths.rank_map, kind=list)[0]["num_nodes"])
    except (LookupError, TypeError, ValueError):  # none yet, or damaged (noted)
        return int(str(given).partition("-")[0]) if str(given).partition("-")[0].isdigit() else 1


def table(rows: list[dict], width: int | None = None):
    """The rows as a Rich table of one line each, fitted to `width` (None: every column, whole)."""
    from rich.cells import cell_len
    from rich.markup import escape
    from rich.table import Table

    names = {r["headline"] for r in rows if r["kind"] != "sweep" and r["headline"]}
    shared = next(iter(names)) if len(names) == 1 else None  # else each cell names its own
    heads = {c: f"{c} {shared}" if shared and c in SCORES else c for c in COLUMNS}
    cells = [_cells(r, shared) for r in rows]
    widths = {c: max(cell_len(heads[c]), *(cell_len(row.get(c, "")) for row in cells)) for c in COLUMNS}
    widths["why"] = min(widths["why"], WHY_WIDTH)
    shown = _fit(widths, width)
    out = Table()
    for column in (c for c in COLUMNS if c in shown):
        overflow = "ellipsis" if column == "why" else "fold"
        out.add_column(heads[column], no_wrap=True, width=shown[column], overflow=overflow)
    for row in cells:
        values = {c: escape(row.get(c, "")) for c in COLUMNS if c in shown}
        if row["state"] in COLOURS:
            values["state"] = f"[{COLOURS[row['state']]}]{row['state']}[/]"
        out.add_row(*values.values())
    return out


def _fit(widths: dict[str, int], width: int | None) -> dict[str, int]:
    """Column -> its width: as many of KEPT_FIRST as fit beside a why column of WHY_SHOWN (or the whole why,
    if shorter), the why shortened to what they leave; none when no run has one."""
    if width is None:
        return widths
    wanted = min(widths["why"], WHY_SHOWN) if widths["why"] > len("why") else 0
    fitting = [n for n in range(3, len(KEPT_FIRST) + 1) if _room(widths, KEPT_FIRST[:n], width) >= 0] or [3]
    beside_why = [n for n in fitting if wanted and _room(widths, KEPT_FIRST[:n], width) >= wanted]
    n = max(beside_why or fitting)  # run, state and epochs always
    shown = {c: widths[c] for c in KEPT_FIRST[:n]}
    room = _room(widths, KEPT_FIRST[:n], width)
    return {**shown, "why": min(widths["why"], room)} if wanted and room >= MIN_WHY else shown


def _room(widths: dict[str, int], columns, width: int) -> int:
    """What a table of `columns` leaves of `width` for one more column's text."""
    return width - _table_width([*(widths[c] for c in columns), 0])


def _table_width(widths: list[int]) -> int:
    """A Rich table's width with columns this wide: a border either side, padding of one each side."""
    return sum(widths) + 3 * len(widths) + 1


def _cells(r: dict, shared: str | None) -> dict[str, str]:
    """One row's cells as plain text, by column; the headline's named in them unless every run `shared` it."""
    if r["kind"] == "sweep":
        axes = " ".join(f"{k.replace('_', '-')}={','.join(map(str, v))}" for k, v in r["axes"].items())
        return {"run": f"{r['run']}/ (sweep, {r['points']} points)", "state": r["state"], "topology": axes}
    per = f" × {r['devices_per_process']} dev" if r["devices_per_process"] else ""
    why = r["why"] or ""
    return {
        "run": f"  {r['run'].split('/')[-1]}" if r["kind"] == "point" else r["run"],
        "state": r["state"],
        "mode": r["mode"] or "?",
        "topology": f"{r['nodes']} node × {r['processes'] // r['nodes']} proc{per}",
        "epochs": f"{r['epochs_done']}/{r['epochs'] or '?'}",
        **{c: _num(r[c], ".4f", None if shared else r["headline"]) for c in SCORES},
        "images/s": _num(r["images_per_s"], ",.0f"),
        "wall time": _duration(r["wall_time_s"]),
        "why": why[:WHY_WIDTH] + ("…" if len(why) > WHY_WIDTH else ""),
    }


def _num(value, spec: str, name: str | None = None) -> str:
    """`value` as `spec` says, after its `name` where one is given; "-" for none."""
    return "-" if value is None else f"{name} {value:{spec}}" if name else format(value, spec)


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}:{m:02d}:{s:02d}" if hours else f"{m}:{s:02d}"
