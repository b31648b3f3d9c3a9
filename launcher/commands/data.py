"""`dali-launch data prepare / synth / check`: data sets made for DALI (data/idx.py, data/synth.py do the
work), and checked (data/data_check.py)."""

from __future__ import annotations

import contextlib
import enum
import sys
from pathlib import Path
from typing import Annotated

import typer

from dali_launch.launcher.console import Interrupted
from dali_launch.trainer.data import formats


class DataFormat(str, enum.Enum):
    lmdb = "lmdb"
    folders = "folders"


def prepare(
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
    from dali_launch.launcher.data import idx

    with _says_interrupted():
        report = idx.prepare(source, target, quality=jpeg_quality, test_fraction=test_fraction, layout=layout.value)
    counts = ", ".join(f"{name} {n:,}" for name, n in report.counts.items())
    typer.echo(f"wrote {report.out_dir}: {counts}")


# data synth's formats: those formats.py names a writer for (read at import: Typer's choices are fixed).
SynthFormat = enum.Enum("SynthFormat", {f.name: f.name for f in formats.FORMATS if f.writer}, type=str)


def synth(
    out: Annotated[Path, typer.Argument(help="New folder for training/ and testing/.")],
    layout: Annotated[
        SynthFormat,
        typer.Option(
            "--format",
            help="; ".join(f"{f.name}: {f.description} (--pipeline {f.name})" for f in formats.FORMATS if f.writer)
            + "; each shard with DALI's index, shard-N.idx.",
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
    from dali_launch.launcher.data import synth as synthesis

    spec = synthesis.SynthSpec(out, layout.value, classes, train, test, seed, image_scale, shard_size, workers)
    with _says_interrupted():
        report = synthesis.synth(spec)
    typer.echo(report.line(spec))


@contextlib.contextmanager
def _says_interrupted():
    """Ctrl-C or SIGTERM while a data set is written (data/new_dir.py cleaned up): one line saying what is
    left, exit 128 + the signal (Typer would make any interrupt a silent 130)."""
    try:
        yield
    except Interrupted as e:
        print(f"dali-launch: {e.line}", file=sys.stderr, flush=True)
        raise typer.Exit(128 + e.signum) from None


def check(
    data_dir: Annotated[
        Path, typer.Argument(help="Folder holding training/ and testing/, in any format dali-launch reads.")
    ],
    decode: Annotated[
        bool, typer.Option("--decode", help="Also decode every image (Pillow): slower, finds what headers hide.")
    ] = False,
):
    """Name every sample DALI could not decode (headers and last bytes, as a run checks them); exit 1 if any."""
    from dali_launch.launcher.data import data_check

    raise typer.Exit(data_check.check(data_dir, decode, typer.echo))
