"""The catalogue of bad inputs: the order of commands and flags, run roots, status, ci, `data prepare` and
`data synth`, and the installed CUDA flavours. catalogue.py says how an entry runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import ERROR, SUBMIT, check_entry, run_entry, snapshot
from test_catalogue_audio import DATA as AUDIO_DATA
from test_catalogue_audio import SETTINGS as AUDIO_SETTINGS
from test_catalogue_config import CONFIG
from test_catalogue_data import DATA, _without_dac
from test_catalogue_formats import BAD_SAMPLES, FORMATS
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
        ["train", "--data-dir", "{data}", "--pipeline", "python_pipelines:noisy", "--deterministic"],
        "--deterministic cannot hold with --pipeline python_pipelines:noisy: its PythonFunction operator runs "
        "Python that DALI neither seeds nor checkpoints; write it with DALI operators, or leave --deterministic out",
        id="deterministic-python-operator",
    ),
    pytest.param(
        ["train", "--sweep", "learning-rate=0.1,0.2"],
        "no such option for `dali-launch train`: --sweep; it is a flag of `dali-launch` (with no command): "
        "dali-launch --sweep ...",
        id="flag-of-another-command",
    ),
    pytest.param(
        ["train", "--sed", "1"],
        "no such option for `dali-launch train`: --sed; did you mean `dali-launch train --seed`?",
        id="flag-misspelt",
    ),
    pytest.param(
        ["status", "x", "--folow"],
        "no such option for `dali-launch status`: --folow; did you mean `dali-launch logs --follow`?",
        id="flag-misspelt-of-another-command",
    ),
    pytest.param(
        ["ci", "--local"],
        "`dali-launch ci` runs the tests and a training job on a SLURM cluster, so it has no --local; here, "
        "run the tests with `python -m pytest` and a local job with `dali-launch --local ...`",
        id="ci-local",
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
        ["runs", "{tmp}/none"],
        "ROOT {tmp}/none does not exist; give the folder that holds the run directories (the runs' --run-root, "
        "default runs/ where they were started)",
        id="runs-missing-root",
    ),
    pytest.param(
        ["runs", "{tmp}/file", "--json"],
        "ROOT {tmp}/file is not a folder; give the folder that holds the run directories (the runs' --run-root, "
        "default runs/ where they were started)",
        id="runs-root-a-file",
    ),
    pytest.param(
        ["runs", "{tmp}/empty", "--prune"],
        "--prune needs a selector of the runs to delete: --failed, --older-than AGE (e.g. 7d), --keep N (all but "
        "the N newest), or --run NAME",
        id="prune-without-selector",
    ),
    pytest.param(
        ["runs", "{tmp}/empty", "--older-than", "7d"],
        "--older-than chooses what `dali-launch runs --prune` deletes; add --prune, or leave --older-than out",
        id="prune-selector-without-prune",
    ),
    pytest.param(
        ["runs", "{tmp}/empty", "--prune", "--older-than", "a week"],
        "--older-than a week is not an age; write a number and s, m, h, d or w: 7d",
        id="prune-older-than-not-an-age",
    ),
    pytest.param(
        ["runs", "{tmp}/empty", "--prune", "--keep", "-1"],
        "--keep -1 must be 0 or more (the newest runs kept)",
        id="prune-keep-negative",
    ),
    pytest.param(
        ["runs", "{tmp}/empty", "--prune", "--run", "gone"],
        "--run gone: no run named gone under --run-root {tmp}/empty; pass a run directory, a run name `dali-launch "
        "runs {tmp}/empty` lists, or a SLURM job id",
        id="prune-run-unknown",
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
        "Invalid value for '--format': Value error, 'lmdb' is not one of 'folders', 'tfrecord', 'webdataset', "
        "'segmentation', 'detection', 'video', 'audio'.; see dali-launch --help",
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
    entries = DATA + FORMATS + BAD_SAMPLES + CONFIG + LAYOUT + NODE_RANGE + SCRIPT + OTHER + MACHINE + RECIPES
    entries += AUDIO_SETTINGS + AUDIO_DATA
    assert len(entries) >= 20 and len({e.id for e in entries}) == len(entries)


# --- the machine a run starts from: GPUs, folders that cannot be written, too little data ------------

NO_GPU = "this machine has no NVIDIA GPU (no /dev/nvidia*)"
MACHINE = [
    pytest.param(
        ["train", "--platform", "gpu", "--data-dir", "{data}"],
        f"--platform gpu, but {NO_GPU}; run on a GPU machine, or use --platform cpu",
        id="platform-gpu-without-gpu",
    ),
    pytest.param(
        ["--local", "--gpus-per-node", "2", "--processes", "2", "--platform", "gpu", "--data-dir", "{data}"],
        f"--platform gpu, but {NO_GPU}; run on a GPU machine, or use --platform cpu",
        id="platform-gpu-without-gpu-local",
    ),
    pytest.param(
        ["train", "--decoder", "mixed", "--data-dir", "{data}"],
        f"--decoder mixed, but {NO_GPU}; run on a GPU machine, or use --decoder cpu",
        id="decoder-mixed-without-gpu",
    ),
    pytest.param(
        ["--local", "--gpus-per-node", "2", "--processes", "2", "--pipeline", "folders", "--data-dir", "{data}"],
        "{data}/training holds 1 training samples, fewer than the job's 2 devices: each needs at least one; use "
        "fewer devices (--nodes, --gpus-per-node) or a larger data set",
        id="fewer-samples-than-devices",
    ),
    pytest.param(
        ["train", "--pipeline", "folders", "--data-dir", "{data}"],
        "--data-dir {data} holds neither training/ nor testing/; a data set needs both training/ and testing/ "
        "folders of class folders of images (as `dali-launch data synth --format folders` makes them)",
        id="folders-layout-advice",
    ),
    pytest.param(
        ["train", "--pipeline", "webdataset", "--data-dir", "{data}"],
        "--data-dir {data} has no testing/; a data set needs both training/ and testing/ folders of *.tar shards "
        "with their DALI indexes (as `dali-launch data synth --format webdataset` makes them)",
        id="webdataset-layout-advice",
    ),
]
MAKERS = {
    "fewer-samples-than-devices": lambda tmp: _folders_of_one(tmp),
    "folders-layout-advice": lambda tmp: _empty(tmp),
    "webdataset-layout-advice": lambda tmp: _training_only(tmp),
}


def _folders_of_one(tmp: Path) -> dict:
    from catalogue import class_folders

    return class_folders(1)(tmp)


def _empty(tmp: Path) -> dict:
    (tmp / "data").mkdir()
    return {"data": tmp / "data"}


def _training_only(tmp: Path) -> dict:
    (tmp / "data" / "training").mkdir(parents=True)
    return {"data": tmp / "data"}


@pytest.mark.parametrize("args, message", MACHINE)
def test_machine(capsys, place, nothing_starts, request, args, message):
    if not list(Path("/dev").glob("nvidia[0-9]*")) or "gpu" not in request.node.callspec.id:
        check_entry(capsys, place, [*args, "--run-root", "{root}"], message, MAKERS.get(request.node.callspec.id))


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(
            ["train", "--data-dir", "{data}", "--run-root", "{fs}/runs"],
            "--run-root {fs}/runs is on a full file system (3 MB free); free space there, or choose another --run-root",
            id="run-root-full",
        ),
        pytest.param(
            ["train", "--data-dir", "{data}", "--run-root", "{root}", "--compile-cache", "{fs}/xla"],
            "cannot write in --compile-cache {fs}/xla: its file system has 3 MB free; choose another, or off",
            id="compile-cache-full",
        ),
        pytest.param(
            ["data", "synth", "{fs}/out"],
            "cannot write OUT {fs}/out: its file system has 3 MB free; choose another directory",
            id="synth-target-full",
        ),
    ],
)
def test_full_file_system(capsys, place, nothing_starts, full_fs, args, message):
    """A file system with less free space than a run needs (a 4 MiB tmpfs, 1 MiB of it taken)."""
    (full_fs / "ballast").write_bytes(bytes(1 << 20))
    folder, fill = place
    args, message = fill([a.replace("{fs}", str(full_fs)) for a in args], message.replace("{fs}", str(full_fs)), None)
    run_entry(capsys, folder, args, message)


def test_full_cache(capsys, place, nothing_starts, full_fs, monkeypatch):
    (full_fs / "ballast").write_bytes(bytes(1 << 20))
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(full_fs / "cache"))
    check_entry(
        capsys,
        place,
        ["train", "--data-dir", "{data}", "--run-root", "{root}"],
        f"cannot write in the cache folder {full_fs}/cache ($DALI_LAUNCH_CACHE): its file system has 3 MB free; "
        "point DALI_LAUNCH_CACHE at a writable folder with space",
    )


@pytest.mark.parametrize(
    "args, message, env",
    [
        pytest.param(
            ["data", "synth", "{tmp}/locked/out"],
            "cannot write OUT {tmp}/locked/out: {tmp}/locked is not writable for this user; choose another directory",
            {},
            id="synth-target-read-only",
        ),
        pytest.param(
            ["data", "prepare", "--from", "{idx}", "--to", "{tmp}/locked/out"],
            "cannot write --to {tmp}/locked/out: {tmp}/locked is not writable for this user; choose another directory",
            {},
            id="prepare-target-read-only",
        ),
        pytest.param(
            ["train", "--data-dir", "{data}", "--run-root", "{root}"],
            "cannot write in the cache folder {tmp}/locked/cache ($DALI_LAUNCH_CACHE): {tmp}/locked is not writable "
            "for this user; point DALI_LAUNCH_CACHE at a writable folder with space",
            {"DALI_LAUNCH_CACHE": "{tmp}/locked/cache"},
            id="cache-read-only",
        ),
    ],
)
def test_read_only_targets(place, args, message, env):
    """The kernel refuses the write (root without CAP_DAC_OVERRIDE): one line, nothing written."""
    folder, fill = place
    args, message = fill(args, message, None)
    env = {k: v.format(tmp=folder) for k, v in env.items()}
    (folder / "locked").mkdir()
    (folder / "locked").chmod(0o555)
    try:
        before = snapshot(folder)
        proc = _without_dac(args, env)
        assert (proc.returncode, proc.stderr) == (2, f"{ERROR}{message}\n")
        assert snapshot(folder) == before and not (folder / "runs").exists()
    finally:
        (folder / "locked").chmod(0o755)
