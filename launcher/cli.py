"""`dali-launch`: the commands, wired. Each command's work lives in its own module.

dali-launch train                                   # one process, this machine, embedded MNIST
dali-launch --local --nodes 1 --gpus-per-node 2 --processes 2   # a real multi-process job, here
dali-launch --nodes 2 --gpus-per-node 8             # a SLURM job through submitit
dali-launch data prepare --from IDX_DIR --to OUT    # IDX files -> Caffe2 LMDBs
dali-launch data synth OUT --format tfrecord        # an ImageNet-like data set, generated
dali-launch config show --config run.toml --epochs 3   # the effective settings, as TOML
dali-launch runs; dali-launch plot runs/A runs/B --out ab.png   # the runs so far, their curves
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated

import typer

from dali_launch.launcher.ci.cluster_ci import CiConfig
from dali_launch.launcher.config import LaunchConfig, RunConfig, SlurmConfig
from dali_launch.launcher.options import build, config_options
from dali_launch.launcher.route.sweep import SweepConfig
from dali_launch.trainer.config import (
    DataConfig,
    DistributedConfig,
    ObserveConfig,
    ResilienceConfig,
    TrainConfig,
)
from dali_launch.trainer.errors import UsageError

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Train Flax networks on DALI pipelines: here, on several local processes, or on SLURM.",
)
data_app = typer.Typer(help="Prepare data sets.", rich_markup_mode=None)
app.add_typer(data_app, name="data")
config_app = typer.Typer(help="Configuration files (--config FILE.toml).", rich_markup_mode=None)
app.add_typer(config_app, name="config")
sweep_app = typer.Typer(help="Sweeps (--sweep KEY=V1,V2,...).", rich_markup_mode=None)
app.add_typer(sweep_app, name="sweep")
slurm_app = typer.Typer(help="SLURM scripts of your own (see `dali-launch task`).", rich_markup_mode=None)
app.add_typer(slurm_app, name="slurm")

RUN_OPTIONS = (
    ("Job", (LaunchConfig,)),
    ("SLURM", (SlurmConfig,)),
    ("Data", (DataConfig,)),
    ("Training", (TrainConfig,)),
    ("Distributed", (DistributedConfig,)),
    ("Checkpoints and failures", (ResilienceConfig,)),
    ("Observe", (ObserveConfig,)),
)


@app.callback(invoke_without_command=True)
@config_options(*RUN_OPTIONS, ("Sweeps", (SweepConfig,)))
def launch(values: dict, ctx: typer.Context):
    """With no command: run a job, on SLURM (default) or with --local on this machine."""
    if ctx.invoked_subcommand is not None:
        given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name).name != "DEFAULT"]
        if given:
            raise UsageError(f"{given[0]} goes after the command: dali-launch {ctx.invoked_subcommand} {given[0]} ...")
        return
    from dali_launch.launcher.route import launch as run_job

    if values["sweep"]:
        from dali_launch.launcher.route import sweep

        sys.exit(sweep.run(values))
    if values["max_parallel"] is not None:
        raise UsageError("--max-parallel caps the points of a --sweep running at once; give a --sweep, or leave it out")
    sys.exit(run_job.resume_run(values, "launch") if values["resume"] else run_job.new_run(build(RunConfig, values)))


@app.command()
@config_options(*[group for group in RUN_OPTIONS if group[0] != "SLURM"])
def train(values: dict):
    """Train in this one process on all its devices (GPUs, else --gpus-per-node CPU devices)."""
    from dali_launch.launcher.route import launch as run_job

    sys.exit(
        run_job.resume_run(values, "train")
        if values["resume"]
        else run_job.new_run(build(RunConfig, values), here=True)
    )


@app.command()
@config_options(*[group for group in RUN_OPTIONS if group[0] != "SLURM"])
def task(values: dict):
    """One task of your own SLURM job step: `srun dali-launch task ...` in an sbatch script or salloc.
    The job's shape comes from the step; `dali-launch slurm template` prints a script to start from."""
    from dali_launch.launcher.backends.allocation import run_in_step

    sys.exit(run_in_step(values))


@slurm_app.command("template")
@config_options(*RUN_OPTIONS)
def slurm_template(values: dict):
    """Print an sbatch script that runs `srun dali-launch task` with these flags: adapt it, then sbatch it."""
    from dali_launch.launcher.backends.slurm_checks import validate_slurm
    from dali_launch.launcher.backends.slurm_template import template
    from dali_launch.launcher.route.checks import validate

    run = build(RunConfig, values)
    validate(run)
    validate_slurm(run)
    typer.echo(template(run, values), nl=False)


@app.command()
@config_options(*RUN_OPTIONS, ("CI", (CiConfig,)))
def ci(values: dict):
    """Cluster CI: submit the test suite and a one-epoch multi-node training run, wait, write JUnit XML."""
    from dali_launch.launcher.ci.cluster_ci import run_ci

    values = {**values, "epochs": values["epochs"] if "epochs" in values.given else 1}  # CI: one epoch by default
    sys.exit(run_ci(build(RunConfig, values), build(CiConfig, values)))


@config_app.command("show")
@config_options(*RUN_OPTIONS)
def config_show(values: dict):
    """Print the effective configuration (defaults < --config FILE < flags) as TOML, itself a --config file."""
    from dali_launch.launcher.config_file import dumps
    from dali_launch.launcher.route.checks import validate

    run = build(RunConfig, values)
    validate(run)
    typer.echo(dumps(run), nl=False)


RunRoot = Annotated[str, typer.Option(help="Folder holding the run directories.")]
JobArg = Annotated[str, typer.Argument(help="A run directory (any mode), or a SLURM job id.")]


@app.command()
def status(job: JobArg, run_root: RunRoot = "runs"):
    """Where a run stands: a SLURM job (squeue, else sacct, else its files), or a local or `train` run."""
    from dali_launch.launcher.commands import jobs as job_control

    typer.echo(job_control.status(job_control.find(job, run_root)))


@app.command()
def logs(
    job: JobArg,
    run_root: RunRoot = "runs",
    rank: Annotated[int | None, typer.Option(help="Only this rank's log, unprefixed.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    follow_timeout_s: Annotated[int, typer.Option(help="Stop following after this long.")] = 86400,
):
    """A run's logs: every rank, prefixed, or one rank; --follow until it ends."""
    from dali_launch.launcher.commands import jobs as job_control

    job_control.logs(job_control.find(job, run_root), rank, follow_timeout_s if follow else None, typer.echo)


@app.command()
def cancel(job: JobArg, run_root: RunRoot = "runs"):
    """Stop a run: scancel a SLURM job; SIGTERM a local run's ranks (they checkpoint, then stop)."""
    from dali_launch.launcher.commands import jobs as job_control

    typer.echo(job_control.cancel_job(job_control.find(job, run_root)))


@app.command("runs")
def runs_(
    root: Annotated[str, typer.Argument(help="Folder holding the run directories.")] = "runs",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list of the rows instead of a table.")] = False,
):
    """Every run under ROOT: state (running, finished, failed, interrupted), mode, topology, epochs, accuracy, speed."""
    import json

    from dali_launch.launcher.commands import runs as run_list

    rows = run_list.collect(Path(root))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    elif not rows:
        typer.echo(f"no runs under {Path(root).absolute()}")
    else:
        from rich.console import Console

        console = Console()
        # Piped or in a log, Rich would squeeze the table into 80 columns: give it the width it needs.
        (console if console.is_terminal else Console(width=250)).print(run_list.table(rows))


@app.command("plot")
def plot_(
    runs: Annotated[list[str], typer.Argument(help="Run directories.")],
    out: Annotated[Path, typer.Option(help="The PNG to write.")] = Path("runs.png"),
):
    """Loss, test accuracy and images/s of several runs over SGD steps, on one figure (needs dali-launch[plot])."""
    from dali_launch.launcher.commands.plot import plot

    typer.echo(f"wrote {plot(runs, out)}")


@sweep_app.command("status")
def sweep_status(
    sweep_dir: Annotated[Path, typer.Argument(help="The sweep directory `--sweep` printed.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list instead of a table.")] = False,
):
    """Each point of a sweep: its values, state and final (or latest) metrics."""
    import json

    from dali_launch.launcher.route import sweep

    rows = sweep.status_rows(sweep_dir)
    typer.echo(json.dumps(rows, indent=2) if as_json else sweep.table(sweep.load(sweep_dir)["axes"].items(), rows))


class DataFormat(str, enum.Enum):
    lmdb = "lmdb"
    folders = "folders"


@data_app.command("prepare")
def data_prepare(
    source: Annotated[Path, typer.Option("--from", help="Folder with MNIST-format IDX files (train-*, t10k-*).")],
    target: Annotated[Path, typer.Option("--to", help="New folder for training/ and testing/.")],
    jpeg_quality: Annotated[int, typer.Option(help="JPEG quality of the stored images.")] = 95,
    test_fraction: Annotated[
        float | None,
        typer.Option(help="With only one IDX split present, the fraction held out for testing (default 0.2)."),
    ] = None,
    layout: Annotated[
        DataFormat,
        typer.Option(
            "--format",
            help="lmdb: Caffe2 LMDBs (--pipeline mnist); folders: SPLIT/<label>/<n>.jpg (--pipeline folders).",
        ),
    ] = DataFormat.lmdb,
):
    """Turn IDX files into the Caffe2 LMDBs DALI reads (DALI_extra's db/MNIST layout), or JPEG class folders."""
    from dali_launch.launcher.data.idx import prepare

    report = prepare(source, target, quality=jpeg_quality, test_fraction=test_fraction, layout=layout.value)
    counts = ", ".join(f"{name} {n:,}" for name, n in report.counts.items())
    typer.echo(f"wrote {report.out_dir}: {counts}")


class SynthFormat(str, enum.Enum):
    folders = "folders"
    tfrecord = "tfrecord"
    webdataset = "webdataset"


@data_app.command("synth")
def data_synth(
    out: Annotated[Path, typer.Argument(help="New folder for training/ and testing/.")],
    layout: Annotated[
        SynthFormat,
        typer.Option(
            "--format",
            help="folders: SPLIT/<class>/<n>.jpg (--pipeline folders); tfrecord: SPLIT/shard-N.tfrecord of "
            "tf.Examples (--pipeline tfrecord); webdataset: SPLIT/shard-N.tar (--pipeline webdataset); "
            "each shard with DALI's index, shard-N.idx.",
        ),
    ] = SynthFormat.folders,
    classes: Annotated[int, typer.Option(help="Number of classes (labels 0..N-1).")] = 100,
    train: Annotated[int, typer.Option(help="Training images.")] = 10_000,
    test: Annotated[int, typer.Option(help="Test images.")] = 1_000,
    seed: Annotated[int, typer.Option(help="Same seed, same bytes.")] = 0,
    image_scale: Annotated[
        float, typer.Option(help="Image sides times this (default: ImageNet's sizes); 0.1 for small test sets.")
    ] = 1.0,
    shard_size: Annotated[int, typer.Option(help="Images per shard file (and per unit of work).")] = 1024,
    workers: Annotated[int, typer.Option(help="Processes writing images; 0: one per core.")] = 0,
):
    """Write a deterministic ImageNet-like data set (sizes, JPEG qualities, ~110 KB per image, real classes)."""
    from dali_launch.launcher.data.synth import SynthSpec, synth

    spec = SynthSpec(out, layout.value, classes, train, test, seed, image_scale, shard_size, workers)
    typer.echo(synth(spec).line(spec))


def main(argv: list[str] | None = None) -> int:
    """Every bad input ends as one line on stderr and exit code 2, never a traceback."""
    try:
        code = app(args=argv, prog_name="dali-launch", standalone_mode=False)
    except typer.Exit as e:
        code = e.exit_code
    except typer.TyperException as e:  # Typer's own usage errors: unknown flag, bad value
        print(f"dali-launch: error: {e.format_message()}; see dali-launch --help", file=sys.stderr)
        return 2
    except UsageError as e:
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


if __name__ == "__main__":
    sys.exit(main())
