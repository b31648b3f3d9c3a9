"""Every bad input: one line on stderr, exit code 2, nothing written, no training started."""
from __future__ import annotations

import shutil

import lmdb
import pytest
from dali_launch.launcher.cli import main


def _run(capsys, args, code: int = 2, stderr: str = "") -> str:
    assert main(args) == code
    err = capsys.readouterr().err
    assert stderr in err, err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("dali-launch: error: "), err
    return err


@pytest.fixture
def run_root(tmp_path):
    root = tmp_path / "runs"
    yield root
    assert not root.exists() or not any(root.iterdir()), "a failed launch left a run directory behind"


def test_missing_data_dir(capsys, run_root, tmp_path):
    _run(capsys, ["train", "--data-dir", str(tmp_path / "nope"), "--run-root", str(run_root)],
         stderr=f"--data-dir {tmp_path / 'nope'} does not exist; make it with `dali-launch data prepare")


def test_directory_that_is_not_an_lmdb(capsys, run_root, tmp_path):
    (tmp_path / "d" / "training").mkdir(parents=True)
    (tmp_path / "d" / "testing").mkdir()
    _run(capsys, ["train", "--data-dir", str(tmp_path / "d"), "--run-root", str(run_root)],
         stderr="training is not an LMDB (no data.mdb)")


def test_corrupt_record(capsys, run_root, tmp_path, mnist_lmdb):
    data = tmp_path / "data"
    shutil.copytree(mnist_lmdb, data)
    with lmdb.open(str(data / "testing"), map_size=1 << 26) as env, env.begin(write=True) as txn:
        txn.put(b"00000007", b"\x0a\x05junk")
    _run(capsys, ["train", "--data-dir", str(data), "--run-root", str(run_root)],
         stderr="record 00000007 of")


def test_global_batch_that_does_not_divide(capsys, run_root, mnist_lmdb):
    _run(capsys, ["--local", "--nodes", "2", "--gpus-per-node", "2", "--global-batch-size", "50",
                  "--data-dir", str(mnist_lmdb), "--run-root", str(run_root)],
         stderr="--global-batch-size 50 is not divisible by 4 devices (2 nodes × 2 GPUs); use a multiple of 4")


@pytest.mark.parametrize("args, message", [
    (["train", "--bogus"], "No such option: --bogus"),
    (["train", "--epochs", "many"], "Invalid value for '--epochs'"),
    (["train", "--epochs", "0"], "--epochs 0 must be at least 1"),
    (["train", "--decoder", "gpu"], "Invalid value for '--decoder'"),
    (["--local", "--gpus-per-node", "4", "--processes", "3"], "--tasks-per-node 3 does not divide --gpus-per-node 4"),
    (["train", "--nodes", "2"], "`train` runs one process here"),
    (["--epochs", "2", "train"], "--epochs goes after the command"),
    (["train", "--momentum", "1.5"], "--momentum 1.5 is out of range"),
    (["train", "--platform", "cpu", "--decoder", "mixed"], "--decoder mixed decodes on the GPU"),
])
def test_bad_flags(capsys, run_root, args, message):
    _run(capsys, [*args, "--run-root", str(run_root)] if args[-1] != "train" else args, stderr=message)


def test_unwritable_run_root(capsys, tmp_path, mnist_lmdb):
    blocker = tmp_path / "file"
    blocker.write_text("")
    _run(capsys, ["train", "--data-dir", str(mnist_lmdb), "--run-root", str(blocker / "runs")],
         stderr="cannot create --run-root")


def test_data_prepare_errors(capsys, tmp_path):
    _run(capsys, ["data", "prepare", "--from", str(tmp_path / "none"), "--to", str(tmp_path / "out")],
         stderr="is not a directory")
    (tmp_path / "empty").mkdir()
    _run(capsys, ["data", "prepare", "--from", str(tmp_path / "empty"), "--to", str(tmp_path / "out")],
         stderr="no MNIST-format IDX files")
    assert not (tmp_path / "out").exists()


def test_help_is_instant_and_lists_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "train" in out and "data" in out and "--gpus-per-node" in out
