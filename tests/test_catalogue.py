"""The catalogue of bad inputs: each ends with one exact line on stderr and exit code 2, nothing written,
no job submitted, no device taken.

Each entry is (arguments, the exact message after `dali-launch: error: `, what to set up). `{tmp}`,
`{root}` (the --run-root, which must never appear) and `{data}` (a good small data set unless the
entry makes a bad one) are filled in per test. Entries run in-process through `cli.main`; those
that need SLURM's own answer use the local cluster; the two permission entries run the CLI as root
without CAP_DAC_OVERRIDE (setpriv), so the kernel, not a mock, refuses the access.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import lmdb
import numpy as np
import pytest
from conftest import REPO

from dali_launch.launcher import data_prepare, datasets
from dali_launch.launcher.cli import main
from dali_launch.trainer import flavours

ERROR = "dali-launch: error: "
BS = "\\"


# --- the data sets entries start from -----------------------------------------------------------

def _image(fmt: str = "JPEG", size: int = 28) -> bytes:
    from PIL import Image
    import io

    pixels = (np.arange(size * size) % 251).astype(np.uint8).reshape(size, size)
    buf = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buf, format=fmt)
    return buf.getvalue()


def _records(n: int = 4, image: bytes | None = None) -> list[bytes]:
    return [data_prepare.caffe2_record(image or _image(), i % 10) for i in range(n)]


def _lmdb(path: Path, records: list[bytes]) -> Path:
    path.mkdir(parents=True)
    with lmdb.open(str(path), map_size=1 << 24) as env, env.begin(write=True) as txn:
        for i, record in enumerate(records):
            txn.put(f"{i:08d}".encode(), record)
    return path


def _dataset(tmp: Path, training: list[bytes] | None = None, testing: list[bytes] | None = None,
             splits=("training", "testing"), empty=()) -> dict:
    """tmp/data with four good 28×28 JPEG records per split, unless a split's records are given;
    splits not in `splits` are left out, those in `empty` are empty folders."""
    root = tmp / "data"
    root.mkdir()
    for split, records in (("training", training), ("testing", testing)):
        if split in splits:
            _lmdb(root / split, _records() if records is None else records)
        elif split in empty:
            (root / split).mkdir()
    return {"data": root}


def _one_bad(record: bytes):
    """A data set whose training record 00000001 is `record`."""
    good = _records()
    return lambda tmp: _dataset(tmp, training=[good[0], record, *good[2:]])


def _truncated(tmp: Path) -> dict:
    values = _dataset(tmp, training=_records(200))
    mdb = values["data"] / "training" / "data.mdb"
    with lmdb.open(str(mdb.parent), readonly=True, lock=False) as env:
        need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    os.truncate(mdb, need // 2)  # a copy that stopped half way
    return {**values, "have": f"{need // 2:,}", "need": f"{need:,}"}


def _not_lmdb(tmp: Path) -> dict:
    values = _dataset(tmp, splits=("testing",))
    (values["data"] / "training").mkdir()
    (values["data"] / "training" / "data.mdb").write_bytes(b"not an lmdb " * 1000)
    return values


def _raw_pixels() -> bytes:
    raw = data_prepare._enum(2, 3) + data_prepare._field(5, bytes(784))  # a BYTE tensor: pixels, not an image
    label = data_prepare._enum(2, 2) + data_prepare._field(4, b"\x01")
    return data_prepare._field(1, raw) + data_prepare._field(1, label)


def _file(tmp: Path) -> dict:
    (tmp / "data.lmdb").write_bytes(b"")
    return {"data": tmp / "data.lmdb"}


def _empty_folder(tmp: Path) -> dict:
    (tmp / "data").mkdir()
    return {"data": tmp / "data"}


DATA = [
    pytest.param(["--data-dir", "{tmp}/nope"], "--data-dir {tmp}/nope does not exist; make it with "
                 "`dali-launch data prepare --from IDX_DIR --to {tmp}/nope`", None, id="data-dir-missing"),
    pytest.param(["--data-dir", "{data}"], "--data-dir {data} is a file; point it at the folder holding training/ "
                 "and testing/", _file, id="data-dir-is-a-file"),
    pytest.param(["--data-dir", "{data}"], "--data-dir {data} holds neither training/ nor testing/; a data set needs "
                 "both training/ and testing/ LMDBs (as `dali-launch data prepare` makes them)", _empty_folder,
                 id="data-dir-empty"),
    pytest.param(["--data-dir", "{data}"], "--data-dir {data} has no testing/; a data set needs both training/ and "
                 "testing/ LMDBs (as `dali-launch data prepare` makes them)",
                 lambda tmp: _dataset(tmp, splits=("training",)), id="testing-missing"),
    pytest.param(["--data-dir", "{data}"], "{data}/training is not an LMDB (no data.mdb); --data-dir must hold "
                 "training/ and testing/ as made by `dali-launch data prepare`",
                 lambda tmp: _dataset(tmp, training=None, splits=("testing",), empty=("training",)),
                 id="split-not-an-lmdb"),
    pytest.param(["--data-dir", "{data}"], "{data}/training is not a readable LMDB ({data}/training: MDB_INVALID: "
                 "File is not an LMDB file); re-create it with `dali-launch data prepare`", _not_lmdb,
                 id="data-mdb-garbage"),
    pytest.param(["--data-dir", "{data}"], "{data}/training/data.mdb is truncated ({have} of {need} bytes); copy it "
                 "again or re-create it with `dali-launch data prepare`", _truncated, id="lmdb-truncated"),
    pytest.param(["--data-dir", "{data}"], "{data}/training holds no records; point --data-dir at a non-empty "
                 "data set", lambda tmp: _dataset(tmp, training=[]), id="data-set-empty"),
    pytest.param(["--data-dir", "{data}"], "record 00000001 of {data}/training is corrupt (truncated field); "
                 "re-create the data set with `dali-launch data prepare`", _one_bad(b"\x0a\x05junk"),
                 id="record-corrupt"),
    pytest.param(["--data-dir", "{data}"], "record 00000001 of {data}/training is corrupt (the image is not an "
                 "encoded image (JPEG, PNG, BMP, TIFF, WebP, GIF)); re-create the data set with "
                 "`dali-launch data prepare`", _one_bad(data_prepare.caffe2_record(b"garbage" * 30, 1)),
                 id="image-not-an-image"),
    pytest.param(["--data-dir", "{data}"], "record 00000001 of {data}/training is a GIF, which DALI's image decoder "
                 "does not read; re-create the data set with `dali-launch data prepare` (it writes JPEGs)",
                 _one_bad(data_prepare.caffe2_record(_image("GIF"), 1)), id="image-gif"),
    pytest.param(["--data-dir", "{data}"], "record 00000001 of {data}/training is not a readable JPEG (its header "
                 "ends before the image size); re-create the data set with `dali-launch data prepare` (it writes "
                 "JPEGs)", _one_bad(data_prepare.caffe2_record(b"\xff\xd8" + b"garbage" * 30, 1)),
                 id="image-jpeg-garbage"),
    pytest.param(["--data-dir", "{data}"], "record 00000001 of {data}/training is a truncated JPEG (it does not end "
                 "with the end-of-image marker); re-create the data set with `dali-launch data prepare` (it writes "
                 "JPEGs)", _one_bad(data_prepare.caffe2_record(_image()[:-10], 1)), id="image-jpeg-truncated"),
    pytest.param(["--data-dir", "{data}"], "record 00000001 of {data}/training holds raw pixels, but the pipeline "
                 "decodes encoded images; re-create the data set with `dali-launch data prepare`",
                 _one_bad(_raw_pixels()), id="image-raw-pixels"),
    pytest.param(["--data-dir", "{data}"], "record 00000001 of {data}/training is a 32×32 image but the records "
                 "before it are 28×28; the model takes one image size, so resize them",
                 _one_bad(data_prepare.caffe2_record(_image("PNG", 32), 1)), id="image-sizes-mixed"),
    pytest.param(["--data-dir", "{data}"], "{data}/testing holds 32×32 images but {data}/training 28×28; the model "
                 "takes one image size, so re-create one of them",
                 lambda tmp: _dataset(tmp, testing=_records(image=_image("JPEG", 32))), id="split-sizes-differ"),
]

TRAIN = "dali-launch --local --nodes N --gpus-per-node G --processes P"
CONFIG = [
    pytest.param(["--bogus"], "No such option: --bogus; see dali-launch --help", id="flag-unknown"),
    pytest.param(["--epochs", "many"], "Invalid value for '--epochs': Input should be a valid integer, unable to "
                 "parse string as an integer; see dali-launch --help", id="epochs-not-a-number"),
    pytest.param(["--epochs", "0"], "--epochs 0 must be at least 1", id="epochs-zero"),
    pytest.param(["--epochs", "-3"], "--epochs -3 must be at least 1", id="epochs-negative"),
    pytest.param(["--batch-size", "0"], "--batch-size 0 must be at least 1", id="batch-zero"),
    pytest.param(["--eval-batch-size", "0"], "--eval-batch-size 0 must be at least 1", id="eval-batch-zero"),
    pytest.param(["--steps-per-call", "0"], "--steps-per-call 0 must be at least 1", id="steps-per-call-zero"),
    pytest.param(["--sync-every-steps", "0"], "--sync-every-steps 0 must be at least 1", id="sync-every-zero"),
    pytest.param(["--reader-threads", "0"], "--reader-threads 0 must be at least 1", id="reader-threads-zero"),
    pytest.param(["--learning-rate", "0"], "--learning-rate 0.0 is out of range; use a value in (0, 100)",
                 id="lr-zero"),
    pytest.param(["--learning-rate", "-0.1"], "--learning-rate -0.1 is out of range; use a value in (0, 100)",
                 id="lr-negative"),
    pytest.param(["--learning-rate", "1e3"], "--learning-rate 1000.0 is out of range; use a value in (0, 100)",
                 id="lr-too-large"),
    pytest.param(["--learning-rate", "nan"], "--learning-rate nan is out of range; use a value in (0, 100)",
                 id="lr-nan"),
    pytest.param(["--momentum", "1.5"], "--momentum 1.5 is out of range; use a value in [0, 1)", id="momentum"),
    pytest.param(["--seed", "-1"], "--seed -1 must be 0 or more", id="seed-negative"),
    pytest.param(["--init-timeout-s", "0"], "--init-timeout-s 0 must be at least 1", id="init-timeout-zero"),
    pytest.param(["--heartbeat-timeout-s", "-5"], "--heartbeat-timeout-s -5 must be at least 1",
                 id="heartbeat-timeout-negative"),
    pytest.param(["--barrier-timeout-s", "0"], "--barrier-timeout-s 0 must be at least 1", id="barrier-timeout-zero"),
    pytest.param(["--platform", "cpu", "--decoder", "mixed"], "--decoder mixed decodes on the GPU but --platform is "
                 "cpu; use --decoder cpu", id="decoder-mixed-on-cpu"),
    pytest.param(["--decoder", "gpu"], "Invalid value for '--decoder': Value error, 'gpu' is not one of 'auto', "
                 "'cpu', 'mixed'.; see dali-launch --help", id="decoder-unknown"),
    pytest.param(["--model", "resnet"], "unknown --model resnet; use one of mlp, cnn, resnet18, or "
                 "package.module:factory", id="model-unknown"),
    pytest.param(["--model", "nosuchpkg.models:build"], "--model nosuchpkg.models:build: cannot import "
                 "nosuchpkg.models (No module named 'nosuchpkg'); install it or put its folder on PYTHONPATH",
                 id="model-not-importable"),
    pytest.param(["--nodes", "2"], f"`train` runs one process here; for several use `{TRAIN}`", id="train-two-nodes"),
]

JOB = ["--local", "--data-dir", "{data}", "--run-root", "{root}"]
LAYOUT = [
    pytest.param(["--nodes", "0"], "--nodes 0 must be at least 1", id="nodes-zero"),
    pytest.param(["--gpus-per-node", "0"], "--gpus-per-node 0 must be at least 1", id="gpus-zero"),
    pytest.param(["--gpus-per-node", "2", "--tasks-per-node", "0"], "--tasks-per-node 0 must be at least 1",
                 id="tasks-zero"),
    pytest.param(["--gpus-per-node", "4", "--processes", "3"], "--tasks-per-node 3 does not divide --gpus-per-node "
                 "4; use 1 (one task per node) or 4 (one task per GPU)", id="tasks-not-dividing-gpus"),
    pytest.param(["--nodes", "2", "--gpus-per-node", "2", "--global-batch-size", "50"], "--global-batch-size 50 is "
                 "not divisible by 4 devices (2 nodes × 2 GPUs); use a multiple of 4", id="global-batch-not-dividing"),
    pytest.param(["--local-timeout-s", "0"], "--local-timeout-s 0 must be at least 1", id="local-timeout-zero"),
]

SUBMIT = ["--nodes", "1", "--platform", "cpu", "--data-dir", "{data}", "--run-root", "{root}"]
SCRIPT = [  # refused before SLURM is asked anything: the values cannot reach sbatch as they are
    pytest.param(["--name", "a b;$(touch x)"], "--name 'a b;$(touch x)' must be 1-64 letters, digits or . _ + -",
                 id="name-hostile"),
    pytest.param(["--time-min", "0"], "--time-min 0 must be at least 1", id="time-min-zero"),
    pytest.param(["--mem-gb", "0"], "--mem-gb 0 must be at least 1", id="mem-gb-zero"),
    pytest.param(["--cpus-per-task", "0"], "--cpus-per-task 0 must be at least 1", id="cpus-per-task-zero"),
    pytest.param(["--sbatch-arg", "mail-type"], "--sbatch-arg 'mail-type' is not KEY=VALUE with a lowercase sbatch "
                 "option name (e.g. mail-type=END)", id="sbatch-arg-not-key-value"),
    pytest.param(["--sbatch-arg", "output=/tmp/x.log"], "--sbatch-arg 'output=/tmp/x.log' would replace the output "
                 "dali-launch sets; dali-launch needs its own value to find the logs and to requeue the job",
                 id="sbatch-arg-output"),
    pytest.param(["--sbatch-arg", "partition=gpu"], "--sbatch-arg 'partition=gpu' would replace the partition "
                 "dali-launch sets; use --partition", id="sbatch-arg-partition"),
    pytest.param(["--sbatch-arg", "comment=a\ntouch /tmp/x"], "--sbatch-arg 'comment=a\\ntouch /tmp/x' contains a "
                 "newline or other control character, which the batch script cannot carry as data; remove it",
                 id="sbatch-arg-newline"),
    pytest.param(["--setup", "module load cuda\nrm -rf ~"], "a --setup line contains a newline; pass each shell "
                 "line as its own --setup", id="setup-newline"),
    pytest.param(["--run-root", "{tmp}/a\nb"], "--run-root {newline_root} contains a newline or other control "
                 "character, which the batch script cannot carry as data; remove it", id="run-root-newline"),
    pytest.param(["--run-root", "{tmp}/runs-%j"], "--run-root '{tmp}/runs-%j' contains '%': SLURM expands % in log "
                 "file names (%j, %t); choose a value without it", id="run-root-percent"),
    pytest.param(["--partition", f"debug{BS}x"], f"--partition 'debug{BS * 2}x' contains '{BS * 2}': sbatch takes it "
                 f"as an escape in #SBATCH lines and drops it; choose a value without it", id="partition-backslash"),
    pytest.param(["--srun-arg", "--comment=a\nb"], "--srun-arg '--comment=a\\nb' contains a newline or other control "
                 "character, which the batch script cannot carry as data; remove it", id="srun-arg-newline"),
]

OTHER = [
    pytest.param(["--epochs", "2", "train"], "--epochs goes after the command: dali-launch train --epochs ...",
                 id="flag-before-command"),
    pytest.param(["train", "--data-dir", "{data}", "--run-root", "{tmp}/file/runs"], "cannot create --run-root "
                 "{tmp}/file/runs: {tmp}/file is not a folder; choose another --run-root", id="run-root-under-a-file"),
    pytest.param(["--local", "--dry-run", "--data-dir", "{data}", "--run-root", "{tmp}/file/runs"], "cannot create "
                 "--run-root {tmp}/file/runs: {tmp}/file is not a folder; choose another --run-root",
                 id="run-root-under-a-file-dry-run"),
    pytest.param(["status", "123", "--run-root", "{root}"], "no run of job 123 under --run-root {root}; pass its run "
                 "directory instead", id="status-unknown-job"),
    pytest.param(["ci", "--pytest-args", "-k 'a", "--platform", "cpu"], "--pytest-args \"-k 'a\" is not valid shell "
                 "quoting (No closing quotation); balance its quotes", id="ci-pytest-args-quoting"),
    pytest.param(["data", "prepare", "--from", "{tmp}/none", "--to", "{tmp}/out"], "--from {tmp}/none is not a "
                 "directory; point it at MNIST-format IDX files", id="prepare-from-missing"),
    pytest.param(["data", "prepare", "--from", "{tmp}/empty", "--to", "{tmp}/out"], "no MNIST-format IDX files "
                 "(train-*/t10k-*-idx?-ubyte[.gz]) in {tmp}/empty", id="prepare-no-idx"),
    pytest.param(["data", "prepare", "--from", "{idx}", "--to", "{tmp}/full"], "--to {tmp}/full exists and is not "
                 "empty; remove it or choose another directory", id="prepare-to-not-empty"),
    pytest.param(["data", "prepare", "--from", "{idx}", "--to", "{tmp}/out", "--jpeg-quality", "0"], "--jpeg-quality 0 "
                 "is out of range; use 1..100", id="prepare-jpeg-quality"),
    pytest.param(["data", "prepare", "--from", "{tmp}/cut", "--to", "{tmp}/out"], "{tmp}/cut/t10k-images-idx3-ubyte "
                 "is truncated: header says (10, 28, 28), found 100 bytes of data", id="prepare-idx-truncated"),
]


# --- running an entry ---------------------------------------------------------------------------

@pytest.fixture
def nothing_starts(monkeypatch):
    """Any job start, submission or device use fails the test loudly: the entries must stop before."""
    import submitit

    from dali_launch.launcher.local import LocalJob
    from dali_launch.trainer import task, topology

    def boom(*args, **kwargs):
        raise AssertionError("a bad input got as far as starting a job or taking a device")

    monkeypatch.setattr(task, "run_task", boom)
    monkeypatch.setattr(LocalJob, "start", boom)
    monkeypatch.setattr(submitit.SlurmExecutor, "submit", boom)
    monkeypatch.setattr(topology, "initialize", boom)
    monkeypatch.setattr(topology, "local_devices", boom)


@pytest.fixture
def place(tmp_path):
    """The folder an entry runs in, with the things entries point at; `fill` formats an entry."""
    (tmp_path / "file").write_text("")
    (tmp_path / "empty").mkdir()
    idx = tmp_path / "idx"
    shutil.copytree(datasets.EMBEDDED_IDX, idx)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("")
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "t10k-images-idx3-ubyte").write_bytes(
        b"\x00\x00\x08\x03" + b"".join(n.to_bytes(4, "big") for n in (10, 28, 28)) + bytes(100))
    (tmp_path / "cut" / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01" + (10).to_bytes(4, "big") + bytes(10))

    def fill(args, message, make):
        values = make(tmp_path) if make else _dataset(tmp_path)
        values = {"tmp": tmp_path, "root": tmp_path / "runs", "idx": idx,
                  "newline_root": repr(f"{tmp_path}/a\nb"), **values}
        return [a.format(**values) for a in args], message.format(**values)

    yield tmp_path, fill


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if not p.is_symlink()}


def _run(capsys, folder: Path, args: list[str], message: str) -> None:
    """The entry: exit code 2, exactly one line, exactly this message, and the folder as it was."""
    before = _snapshot(folder)
    code = main(args)
    err = capsys.readouterr().err
    assert (code, err) == (2, f"{ERROR}{message}\n")
    assert _snapshot(folder) == before, "a bad input left something written"
    assert not (folder / "runs").exists()


@pytest.mark.parametrize("args, message, make", DATA)
def test_data(capsys, place, nothing_starts, args, message, make):
    folder, fill = place
    args, message = fill(["train", *args, "--run-root", "{root}"], message, make)
    _run(capsys, folder, args, message)


@pytest.mark.parametrize("args, message", CONFIG)
def test_config(capsys, place, nothing_starts, args, message):
    folder, fill = place
    _run(capsys, folder, *fill(["train", *args, "--data-dir", "{data}", "--run-root", "{root}"], message, None))


@pytest.mark.parametrize("args, message", LAYOUT)
def test_layout(capsys, place, nothing_starts, args, message):
    folder, fill = place
    _run(capsys, folder, *fill([*JOB, *args], message, None))


@pytest.mark.parametrize("args, message", SCRIPT)
def test_slurm_values(capsys, place, nothing_starts, args, message):
    folder, fill = place
    _run(capsys, folder, *fill([*SUBMIT, *args], message, None))


@pytest.mark.parametrize("args, message", OTHER)
def test_other(capsys, place, nothing_starts, args, message):
    folder, fill = place
    _run(capsys, folder, *fill(args, message, None))


# --- entries that need the installed packages, SLURM, or the kernel's permission checks ---------------

def _fake_distribution(site: Path, name: str, version: str) -> None:
    """An installed distribution as importlib.metadata sees it: a dist-info folder on sys.path."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize("command", [["train"], SUBMIT], ids=["train", "slurm"])
@pytest.mark.parametrize("extra, message", [
    pytest.param("jax-cuda", "{dali} (CUDA {dali_cuda}) does not match jax-cuda{other}-plugin (CUDA {other}); "
                 "pip uninstall -y {dali} && pip install 'dali-launch[cuda{other}]'", id="flavour-mismatch"),
    pytest.param("nvidia-dali", "both {both} are installed and share one module; pip uninstall -y {both_names}, "
                 "then install one flavour", id="two-dali-flavours"),
])
def test_flavours(capsys, place, nothing_starts, monkeypatch, command, extra, message):
    """A JAX CUDA plugin of the other CUDA than the installed DALI: refused before any job or device."""
    (dali, dali_cuda), = flavours.installed(flavours.DALI).items()
    other = {12: 13, 13: 12}[dali_cuda]
    folder, fill = place
    site = folder / "site"
    name = f"jax-cuda{other}-plugin" if extra == "jax-cuda" else f"nvidia-dali-cuda{other}0"
    _fake_distribution(site, name, "0.0.1")
    monkeypatch.syspath_prepend(str(site))
    both = sorted([dali, f"nvidia-dali-cuda{other}0"])
    message = message.format(dali=dali, dali_cuda=dali_cuda, other=other, both=" and ".join(both),
                             both_names=" ".join(both))
    _run(capsys, folder, *fill([*command, "--data-dir", "{data}", "--run-root", "{root}"], message, None))


def test_no_sbatch_here(capsys, place, nothing_starts, monkeypatch):
    folder, fill = place
    (folder / "bin").mkdir()
    monkeypatch.setenv("PATH", str(folder / "bin"))
    _run(capsys, folder, *fill(SUBMIT, "sbatch is not on PATH; submit from a machine with SLURM's commands "
                                        "(a login node), or run here with --local", None))


@pytest.mark.slurm
@pytest.mark.parametrize("args, message", [
    pytest.param(["--partition", "nope"], "--partition nope does not exist (sinfo); see `sinfo -s`",
                 id="partition-unknown"),
    pytest.param(["--nodes", "3"], "--nodes 3 is more than the 2 nodes of partition debug", id="nodes-too-many"),
    pytest.param(["--platform", "gpu", "--gpus-per-node", "1"], "partition debug has no GPUs (sinfo shows no gpu "
                 "GRES); choose a GPU --partition, or --platform cpu", id="gpus-on-cpu-partition"),
])
def test_slurm_says_no(capsys, place, nothing_starts, monkeypatch, slurm_env, args, message):
    """Entries only SLURM can answer, asked of the local cluster (sinfo) before anything is written."""
    folder, fill = place
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    _run(capsys, folder, *fill([*SUBMIT, *args], message, None))


@pytest.mark.slurm
def test_slurm_broken(capsys, place, nothing_starts, monkeypatch, slurm_env):
    """SLURM's commands are here but its configuration is broken: sinfo's own complaint, before anything."""
    folder, fill = place
    (folder / "slurm.conf").write_text("ClusterName=broken\n")  # sinfo refuses it at once
    monkeypatch.setenv("PATH", slurm_env["PATH"])
    monkeypatch.setenv("SLURM_CONF", str(folder / "slurm.conf"))
    _run(capsys, folder, *fill(SUBMIT, "SLURM does not answer (sinfo: fatal: Unable to process configuration file); "
                                       "check SLURM_CONF and that slurmctld runs, or run here with --local", None))


def _without_dac(args: list[str]) -> subprocess.CompletedProcess:
    """The CLI as root minus the capabilities that bypass file permissions: the kernel checks them."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux)")
    return subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--",
                           sys.executable, "-m", "dali_launch.launcher.cli", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args, message, mode", [
    pytest.param(["train", "--data-dir", "{data}", "--run-root", "{root}"], "--data-dir {data} is not readable; fix "
                 "its permissions", "data", id="data-dir-unreadable"),
    pytest.param(["train", "--data-dir", "{data}", "--run-root", "{tmp}/locked/runs"], "cannot write in --run-root "
                 "{tmp}/locked/runs: {tmp}/locked is not writable for this user; choose a writable folder", "locked",
                 id="run-root-unwritable"),
])
def test_permissions(place, args, message, mode):
    folder, fill = place
    args, message = fill(args, message, None)
    target = folder / mode
    target.mkdir(exist_ok=True)
    target.chmod(0o000 if mode == "data" else 0o555)
    try:
        before = _snapshot(folder)
        proc = _without_dac(args)
        assert (proc.returncode, proc.stderr) == (2, f"{ERROR}{message}\n")
        assert _snapshot(folder) == before and not (folder / "runs").exists()
    finally:
        target.chmod(0o755)


# --- what the catalogue does not refuse -------------------------------------------------------------

def test_png_records_are_fine(tmp_path):
    """DALI decodes PNG (and BMP, TIFF, WebP) as well as JPEG: a set of 28×28 PNGs passes the checks, and DALI's
    own reader and decoder read it as the pipeline does."""
    from nvidia.dali import fn, pipeline_def, types

    data = _dataset(tmp_path, training=_records(image=_image("PNG")), testing=_records(image=_image("BMP")))["data"]
    datasets.check(data, "--data-dir")

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def read(path):
        images, _ = fn.readers.caffe2(path=path)
        return fn.decoders.image(images, device="cpu", output_type=types.GRAY)

    for split in ("training", "testing"):
        pipe = read(str(data / split))
        pipe.build()
        (images,) = pipe.run()
        assert images.as_tensor().shape() == [4, 28, 28, 1]


def test_the_catalogue_is_long_enough():
    entries = DATA + CONFIG + LAYOUT + SCRIPT + OTHER
    assert len(entries) >= 20 and len({e.id for e in entries}) == len(entries)
