"""`dali-launch`: the commands, wired. Each command group's work lives in its own module (commands/).

dali-launch train                                   # one process, this machine, embedded MNIST
dali-launch --local --nodes 1 --gpus-per-node 2 --processes 2   # a real multi-process job, here
dali-launch --nodes 2 --gpus-per-node 8             # a SLURM job through submitit
dali-launch data prepare --from IDX_DIR --to OUT    # IDX files -> Caffe2 LMDBs
dali-launch data synth OUT --format tfrecord        # an ImageNet-like data set, generated
dali-launch data check DATA_DIR [--decode]          # every image DALI could not decode, named
dali-launch config show --config run.toml --epochs 3   # the effective settings, as TOML
dali-launch runs; dali-launch plot runs/A runs/B --out ab.png   # the runs so far, their curves
"""

from __future__ import annotations

import sys

import typer

from dali_launch.launcher.commands import ci, config_show, data, flags_reference, jobs, plot, run, runs, slurm, sweep
from dali_launch.launcher.help_panels import GroupedCommand, GroupedGroup
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import ending
from dali_launch.trainer.run_dir import take_notes

HELP = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
app = typer.Typer(
    cls=GroupedGroup,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=HELP,
    help="Train Flax networks on DALI pipelines: here, on several local processes, or on SLURM. "
    "`dali-launch` alone prints this; a job needs at least one flag (e.g. `dali-launch --nodes 2`).",
)
app.callback(invoke_without_command=True)(run.submit)
app.command("train", cls=GroupedCommand)(run.train)
app.command("task", cls=GroupedCommand)(run.task)
app.command("ci")(ci.ci)
app.command("status")(jobs.status)
app.command("logs")(jobs.logs)
app.command("cancel")(jobs.cancel)
app.command("runs")(runs.runs)
app.command("plot")(plot.plot)

GROUPS = (
    ("data", "Prepare data sets.", {"prepare": data.prepare, "synth": data.synth, "check": data.check}),
    ("config", "Configuration files (--config FILE.toml).", {"show": config_show.show, "flags": flags_reference.flags}),
    ("sweep", "Sweeps (--sweep KEY=V1,V2,...).", {"status": sweep.status}),
    ("slurm", "SLURM scripts of your own (see `dali-launch task`).", {"template": slurm.template}),
)
for name, about, commands in GROUPS:
    group = typer.Typer(help=about, rich_markup_mode=None, context_settings=HELP)
    for command, function in commands.items():
        group.command(command)(function)
    app.add_typer(group, name=name)


def main(argv: list[str] | None = None) -> int:
    """Every bad input ends as one line on stderr and exit code 2, never a traceback. No arguments at
    all: the help, exit 0 (a bare word must not submit a job). A run directory's damaged files that a
    command read around (run_dir.read_json) are said last, on stderr, one line each."""
    take_notes(forget=True)  # an earlier command's, in this process (tests)
    try:
        return _command(sys.argv[1:] if argv is None else argv)
    finally:
        for line in take_notes():
            print(f"dali-launch: warning: {line}", file=sys.stderr, flush=True)


def _command(argv: list[str]) -> int:
    try:
        code = app(args=argv or ["--help"], prog_name="dali-launch", standalone_mode=False)
    except typer.Exit as e:
        code = e.exit_code
    except typer.TyperException as e:  # Typer's own usage errors: unknown flag, bad value
        print(f"dali-launch: error: {_usage_error(e)}", file=sys.stderr)
        return 2
    except UsageError as e:  # its one line says it all: no damage notes beside it
        take_notes()
        print(f"dali-launch: error: {e}", file=sys.stderr)
        return 2
    except (typer.Abort, KeyboardInterrupt):
        print("dali-launch: interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # sys.exit("message") from a task run in this process
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr, flush=True)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code if isinstance(code, int) else 0


def _usage_error(e: typer.TyperException) -> str:
    """Click's message; for an unknown flag, the command where it lives or the one it was near."""
    if e.__class__.__name__ == "NoSuchOption":  # Typer vendors click: typer._click.exceptions
        from dali_launch.launcher.usage import unknown_flag

        return unknown_flag(app, e.option_name, e.ctx.command_path if e.ctx else "dali-launch")
    return f"{e.format_message()}; see dali-launch --help"


def run() -> None:
    """The console script: `main`'s exit code, without the interpreter's teardown (ending.leave), which
    for a task run in this process (`train`) unloads XLA's and DALI's native state for half a second."""
    ending.leave(main())


if __name__ == "__main__":
    run()
