"""Config dataclasses as the CLI (launcher/options.py): defaults < --config file < flags, and which
values were given at all (a value equal to its default may still have been asked for)."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

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


def test_train_help_is_grouped_short_and_free_of_measurements(capsys, monkeypatch):
    """`train --help` at 100 columns: a heading per concern naming its page, one short line or two per flag,
    no measured figure (those live in docs/), and where every flag is said in full."""
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 250 and max(map(len, lines)) <= 100, (len(lines), max(map(len, lines)))
    for heading in ("Job (docs/scale.md):", "Data (docs/data.md):", "Model (docs/models.md):", "Task (docs/tasks.md):"):
        assert heading in lines, heading
    assert "Checkpoints and failures (docs/resilience.md):" in lines and "docs/flags.md" in lines[-1]
    assert not re.search(r"\d %|\d(\.\d+)?x (faster|slower)|\bH[12]00s?\b|\d+(\.\d+)? s\b", out), out


def test_train_help_leaves_out_the_job_flags_train_does_not_take(capsys, captured, monkeypatch):
    """`train` is one process here: --nodes, --processes, --local and --local-timeout-s shape or bound a job, so
    its help leaves them out (the job's help lists them); given, they still reach its checks. --pipeline's help
    names every built-in pipeline, from the registry."""
    from dali_launch.trainer.data.registry import pipelines

    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["train", "--help"]) == 0
    train = capsys.readouterr().out
    assert cli.main(["--help"]) == 0
    job = capsys.readouterr().out
    for flag in ("--nodes", "--processes", "--local ", "--local-timeout-s"):
        assert flag not in train and flag in job, flag
    assert "--dry-run" in train and "--resume" in train and "--gpus-per-node" in train
    listed = re.search(r"--pipeline <str> +(.*?)\[default", train, re.S).group(1)
    assert all(f"{name}," in listed for name in pipelines()), listed
    assert cli.main(["train", "--nodes", "2"]) == 0 and captured["run"].launch.nodes == "2"  # for its check to refuse


def test_docs_flags_is_what_config_flags_prints(capsys):
    """docs/flags.md, the reference of every flag, is the command's output: a new or changed flag shows there."""
    assert cli.main(["config", "flags"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "flags.md").read_text()
