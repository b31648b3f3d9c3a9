"""The catalogue of bad inputs: the order of commands and flags, run roots, status, ci, `data prepare` and
`data synth`, and the installed CUDA flavours. catalogue.py says how an entry runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import SUBMIT, check_entry
from test_catalogue_config import CONFIG
from test_catalogue_data import DATA
from test_catalogue_jobs import LAYOUT, NODE_RANGE, SCRIPT
from test_catalogue_recipes import RECIPES

from dali_launch.trainer import flavours

OTHER = [
    pytest.param(
        ["--epochs", "2", "train"],
        "--epochs goes after the command: dali-launch train --epochs ...",
        id="flag-before-command",
    ),
    pytest.param(
        ["train", "--data-dir", "{data}", "--run-root", "{tmp}/file/runs"],
        "cannot create --run-root {tmp}/file/runs: {tmp}/file is not a folder; choose another --run-root",
        id="run-root-under-a-file",
    ),
    pytest.param(
        ["--local", "--dry-run", "--data-dir", "{data}", "--run-root", "{tmp}/file/runs"],
        "cannot create --run-root {tmp}/file/runs: {tmp}/file is not a folder; choose another --run-root",
        id="run-root-under-a-file-dry-run",
    ),
    pytest.param(
        ["slurm", "template", "--nodes", "1-2", "--sample-order", "global", "--global-batch-size", "100"],
        "--nodes 1-2 is a range, but the template's srun step reopens its run only with the shape it started "
        "with; give one count, e.g. --nodes 1, or submit the range with `dali-launch --nodes 1-2`",
        id="slurm-template-node-range",
    ),
    pytest.param(
        ["status", "123", "--run-root", "{root}"],
        "no run of job 123 under --run-root {root}; pass its run directory instead",
        id="status-unknown-job",
    ),
    pytest.param(
        ["logs", "{tmp}/runs/gone-20261130-120000", "--run-root", "{root}"],
        "{tmp}/runs/gone-20261130-120000: no such run directory; pass one that dali-launch made (see `dali-launch runs`)",
        id="logs-missing-run-directory",
    ),
    pytest.param(
        ["cancel", "gone-20261130-120000", "--run-root", "{root}"],
        "no run named gone-20261130-120000 under --run-root {root}; pass a run directory, a run name "
        "`dali-launch runs {root}` lists, or a SLURM job id",
        id="cancel-unknown-run-name",
    ),
    pytest.param(
        ["status", "{tmp}/empty"],
        "{tmp}/empty is not a run directory (no config.json); pass one that dali-launch made",
        id="status-not-a-run-directory",
    ),
    pytest.param(
        ["ci", "--pytest-args", "-k 'a", "--platform", "cpu"],
        '--pytest-args "-k \'a" is not valid shell quoting (No closing quotation); balance its quotes',
        id="ci-pytest-args-quoting",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{tmp}/none", "--to", "{tmp}/out"],
        "--from {tmp}/none is not a directory; point it at MNIST-format IDX files",
        id="prepare-from-missing",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{tmp}/empty", "--to", "{tmp}/out"],
        "no MNIST-format IDX files (train-*/t10k-*-idx?-ubyte[.gz]) in {tmp}/empty",
        id="prepare-no-idx",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{idx}", "--to", "{tmp}/full"],
        "--to {tmp}/full exists and is not empty; remove it or choose another directory",
        id="prepare-to-not-empty",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{idx}", "--to", "{tmp}/out", "--jpeg-quality", "0"],
        "--jpeg-quality 0 is out of range; use 1..100",
        id="prepare-jpeg-quality",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{tmp}/cut", "--to", "{tmp}/out"],
        "{tmp}/cut/t10k-images-idx3-ubyte is truncated: header says (10, 28, 28), found 100 bytes of data",
        id="prepare-idx-truncated",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/full"],
        "OUT {tmp}/full exists and is not empty; remove it or choose another directory",
        id="synth-out-not-empty",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/file/out"],
        "OUT {tmp}/file/out is under a file; choose another directory",
        id="synth-out-under-a-file",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--train", "0"],
        "--train 0: a data set needs at least 1; use a positive count",
        id="synth-zero-train",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--classes", "10", "--train", "5"],
        "--train 5 is fewer than --classes 10; every class needs an image",
        id="synth-fewer-images-than-classes",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--image-scale", "2"],
        "--image-scale 2.0 is out of range; use a value in (0, 1]",
        id="synth-image-scale",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--format", "lmdb"],
        "Invalid value for '--format': Value error, 'lmdb' is not one of 'folders', 'tfrecord', 'webdataset'.; "
        "see dali-launch --help",
        id="synth-unknown-format",
    ),
]


@pytest.mark.parametrize("args, message", OTHER)
def test_other(capsys, place, nothing_starts, args, message):
    check_entry(capsys, place, args, message)


def _fake_distribution(site: Path, name: str, version: str) -> None:
    """An installed distribution as importlib.metadata sees it: a dist-info folder on sys.path."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize("command", [["train"], SUBMIT], ids=["train", "slurm"])
@pytest.mark.parametrize(
    "extra, message",
    [
        pytest.param(
            "jax-cuda",
            "{dali} (CUDA {dali_cuda}) does not match jax-cuda{other}-plugin (CUDA {other}); "
            "pip uninstall -y {dali} && pip install 'dali-launch[cuda{other}]'",
            id="flavour-mismatch",
        ),
        pytest.param(
            "nvidia-dali",
            "both {both} are installed and share one module; pip uninstall -y {both_names}, then install one flavour",
            id="two-dali-flavours",
        ),
    ],
)
def test_flavours(capsys, place, nothing_starts, monkeypatch, command, extra, message):
    """A JAX CUDA plugin of the other CUDA than the installed DALI: refused before any job or device."""
    ((dali, dali_cuda),) = flavours.installed(flavours.DALI).items()
    other = {12: 13, 13: 12}[dali_cuda]
    site = place[0] / "site"
    name = f"jax-cuda{other}-plugin" if extra == "jax-cuda" else f"nvidia-dali-cuda{other}0"
    _fake_distribution(site, name, "0.0.1")
    monkeypatch.syspath_prepend(str(site))
    both = sorted([dali, f"nvidia-dali-cuda{other}0"])
    message = message.format(
        dali=dali, dali_cuda=dali_cuda, other=other, both=" and ".join(both), both_names=" ".join(both)
    )
    check_entry(capsys, place, [*command, "--data-dir", "{data}", "--run-root", "{root}"], message)


def test_the_catalogue_is_long_enough():
    entries = DATA + CONFIG + LAYOUT + NODE_RANGE + SCRIPT + OTHER + RECIPES
    assert len(entries) >= 20 and len({e.id for e in entries}) == len(entries)
