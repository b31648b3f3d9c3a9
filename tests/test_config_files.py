"""`--config FILE.toml`: defaults < file < flags, one-line errors naming file, key and fix, `config show`,
and the config.toml every run directory keeps."""

from __future__ import annotations

import json

import pytest
import tomllib
from conftest import check_ok, dali_launch
from run_readers import only_run

from dali_launch.launcher import config_file
from dali_launch.launcher.cli import main
from dali_launch.launcher.run_config import RunConfig


def _show(capsys, *args: str) -> dict:
    assert main(["config", "show", *args]) == 0, capsys.readouterr().err
    return tomllib.loads(capsys.readouterr().out)


def _write(tmp_path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return str(path)


def test_defaults_then_file_then_flags(capsys, tmp_path):
    path = _write(
        tmp_path,
        '[train]\nmodel = "cnn"\nepochs = 3\nbatch_size = 64\nlearning_rate = 1\n'
        '[data]\npipeline = "folders"\nimage_size = 32\n[slurm]\nsetup = ["module load cuda"]\n',
    )
    shown = _show(capsys, "--config", path, "--epochs", "7", "--batch-size", "50")
    assert shown["model"]["model"] == "cnn"  # file over default (an earlier version's [train] table: its keys' tables)
    assert shown["step"]["epochs"] == 7  # flag over file
    assert shown["step"]["batch_size"] == 50  # a flag given explicitly wins even when it equals the default
    assert shown["optimizer"]["learning_rate"] == 1.0  # TOML's integer taken for a float
    assert shown["optimizer"]["momentum"] == 0.9  # untouched default
    assert shown["data"] == {**shown["data"], "pipeline": "folders", "image_size": 32}
    assert shown["slurm"]["setup"] == ["module load cuda"]
    assert _show(capsys)["step"]["epochs"] == 5  # no file: the defaults
    tables = _write(tmp_path, '[model]\nmodel = "cnn"\n[step]\nepochs = 3\n[optimizer]\nlearning_rate = 1\n')
    shown = _show(capsys, "--config", tables)
    assert (shown["model"]["model"], shown["step"]["epochs"], shown["optimizer"]["learning_rate"]) == ("cnn", 3, 1.0)


def test_show_prints_a_config_file_that_reproduces_itself(capsys, tmp_path):
    assert main(["config", "show", "--epochs", "2", "--name", 'a "quoted" name\\', "--partition", "gpu"]) == 0
    first = capsys.readouterr().out
    assert main(["config", "show", "--config", _write(tmp_path, first)]) == 0
    assert capsys.readouterr().out == first
    assert "# data_dir is unset" in first  # TOML has no null: unset values are comments


@pytest.mark.parametrize("text", ['a "b" \\ c', "tab\tnew\nline", "ünïcødé ☃ \U0001f600", "del \x7f bell \x07", ""])
def test_strings_survive_toml(text):
    assert tomllib.loads(f"x = {config_file.dumps_value(text)}")["x"] == text


@pytest.mark.parametrize(
    "text, message",
    [
        ("[train]\nepoch = 3\n", "--config {path}: unknown key epoch in [train]; did you mean epochs?"),
        ("[stpe]\nepochs = 3\n", "--config {path}: unknown table [stpe]; did you mean [step]?"),
        ("epochs = 3\n", "--config {path}: epochs is outside any table; put it under [step]"),
        ("[step]\nepoch = 3\n", "--config {path}: unknown key epoch in [step]; did you mean epochs?"),
        ("[step]\nmodel = 3\n", "--config {path}: unknown key model in [step]; model belongs in [model]"),
        (
            '[train]\ndata_dir = "/data"\n',
            "--config {path}: unknown key data_dir in [train]; data_dir belongs in [data]",
        ),
        ('[distributed]\nbackend = "slurm"\n', "unknown key backend in [distributed]; dali-launch sets backend itself"),
        (
            '[train]\nepochs = "3"\n',
            '--config {path}: [train] epochs = "3" is a string; write an integer, e.g. epochs = 5',
        ),
        ("[launch]\nlocal = 1\n", "[launch] local = 1 is an integer; write true or false, e.g. local = false"),
        ('[train]\nlearning_rate = "fast"\n', '[train] learning_rate = "fast" is a string; write a number'),
        ('[slurm]\nsetup = "module load x"\n', '[slurm] setup = "module load x" is a string; write a list of quoted'),
        ('[data]\ndecoder = "gpu"\n', '[data] decoder = "gpu" is not one of auto, cpu, mixed'),
        ("[train]\nepochs = 3\n[train]\n", "--config {path} is not valid TOML (Cannot declare ('train',) twice"),
        ("[train]\nepochs = 0\n", "--epochs 0 must be at least 1"),  # values from files meet the flags' checks
    ],
)
def test_bad_files_are_one_clear_line(capsys, tmp_path, text, message):
    path = _write(tmp_path, text)
    assert main(["train", "--config", path, "--run-root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dali-launch: error: ") and err.count("\n") == 1, err
    assert message.format(path=path) in err, err
    assert not (tmp_path / "runs").exists()


def test_a_file_that_is_not_utf8(capsys, tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes('[train]\nmodel = "cnn"\n# r\u00e9sum\u00e9\n'.encode("latin-1"))  # an editor's Latin-1
    assert main(["train", "--config", str(path), "--run-root", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == (
        f"dali-launch: error: --config {path} is not UTF-8 text (byte 0xe9 in line 3); save it as UTF-8\n"
    )
    assert not (tmp_path / "runs").exists()


def test_missing_file_and_misplaced_flag(capsys, tmp_path):
    assert main(["config", "show", "--config", str(tmp_path / "none.toml")]) == 2
    assert f"--config {tmp_path / 'none.toml'} cannot be read (No such file or directory)" in capsys.readouterr().err
    assert main(["--config", _write(tmp_path, ""), "train"]) == 2
    assert "--config goes after the command: dali-launch train --config ..." in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_keeps_its_resolved_config_toml(small_lmdb, tmp_path, capsys):
    """The file sets the data and the batch, a flag the learning rate; config.toml holds all three and
    repeats the run when given back as --config."""
    path = _write(
        tmp_path,
        f"[data]\ndata_dir = {json.dumps(str(small_lmdb))}\n[train]\nepochs = 1\n"
        f"batch_size = 100\n[launch]\nrun_root = {json.dumps(str(tmp_path / 'runs'))}\n",
    )
    check_ok(dali_launch("train", "--config", path, "--learning-rate", "0.05"))
    paths = only_run(tmp_path / "runs")
    spec = json.loads(paths.config.read_text())
    assert (spec["step"]["batch_size"], spec["optimizer"]["learning_rate"], spec["step"]["epochs"]) == (100, 0.05, 1)
    assert json.loads(paths.metrics.read_text())["train_samples"] == 800
    saved = paths.config_toml.read_text()
    assert tomllib.loads(saved)["data"]["data_dir"] == str(small_lmdb.resolve())
    assert main(["config", "show", "--config", str(paths.config_toml)]) == 0
    assert capsys.readouterr().out == saved
    assert config_file.load(str(paths.config_toml), ())["learning_rate"] == 0.05
    assert set(tomllib.loads(saved)) == {f for f in RunConfig.__dataclass_fields__}
