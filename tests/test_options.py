"""Config dataclasses as the CLI (launcher/options.py): defaults < --config file < flags, and which
values were given at all (a value equal to its default may still have been asked for)."""

from __future__ import annotations

import pytest

from dali_launch.launcher import cli
from dali_launch.launcher.ci import cluster_ci
from dali_launch.launcher.route import launch


@pytest.fixture
def captured(monkeypatch):
    """What `ci` and `train` were asked to run, without running anything."""
    seen = {}
    monkeypatch.setattr(cluster_ci, "run_ci", lambda run, ci: seen.setdefault("run", run) and 0)
    monkeypatch.setattr(launch, "new_run", lambda run, here=False: seen.setdefault("run", run) and 0)
    return seen


@pytest.mark.parametrize(
    "flags, file, epochs",
    [
        ([], None, 1),  # cluster CI trains one epoch unless asked
        (["--epochs", "5"], None, 5),  # 5 is the default of `train`: asked for, so kept
        (["--epochs", "3"], None, 3),
        ([], "[train]\nepochs = 5\n", 5),
        (["--epochs", "2"], "[train]\nepochs = 5\n", 2),
    ],
)
def test_ci_epochs_from_flag_and_file(captured, tmp_path, flags, file, epochs):
    config = []
    if file:
        (tmp_path / "run.toml").write_text(file)
        config = ["--config", str(tmp_path / "run.toml")]
    assert cli.main(["ci", *flags, *config]) == 0
    assert captured["run"].step.epochs == epochs


def test_flags_win_over_the_file_and_the_file_over_defaults(captured, tmp_path):
    (tmp_path / "run.toml").write_text("[train]\nepochs = 4\nbatch_size = 64\n[data]\nprefetch = 2\n")
    assert cli.main(["train", "--config", str(tmp_path / "run.toml"), "--batch-size", "50"]) == 0
    run = captured["run"]
    assert (run.step.epochs, run.step.batch_size, run.data.prefetch, run.optimizer.momentum) == (4, 50, 2, 0.9)


def test_help_lists_the_commands_and_the_flags(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "train" in out and "data" in out and "--gpus-per-node" in out and "--steps-per-call" in out
