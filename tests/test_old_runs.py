"""A run directory written by an earlier version goes on: tests/golden/old-run holds one as that version wrote it
(its config.json, config.toml and epoch-end checkpoint, with BatchNorm statistics, an EMA and a gradient
accumulator in the train state), trained one epoch of bn_models:TinyBatchNormMLP on the embedded sample."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import CLI, REPO

from dali_launch.trainer.cache import cache_root

OLD_RUN = REPO / "tests" / "golden" / "old-run"
RECORDED_DATA = "/root/.cache/dali-launch/mnist-t10k"  # where the embedded sample was when it was written


@pytest.fixture
def old_run(tmp_path) -> Path:
    """A copy of the kept run; where this machine keeps the embedded sample elsewhere (another cache root), its
    data folder is named as a user who moved their cache would: the run's data, not its format, is the test's."""
    run = tmp_path / "old-run"
    shutil.copytree(OLD_RUN, run)
    here = str((cache_root() / "mnist-t10k").resolve())
    if here != RECORDED_DATA:
        for name in ("config.json", "config.toml"):
            (run / name).write_text((run / name).read_text().replace(RECORDED_DATA, here))
    return run


def _cli(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_an_old_run_directory_resumes_from_its_checkpoint(old_run):
    proc = _cli("--resume", str(old_run), "--epochs", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resumed from checkpoint 160: epoch 1, 0 device calls into it" in proc.stdout
    epochs = [json.loads(line) for line in (old_run / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in epochs] == [0, 1]
    assert epochs[1]["test_accuracy"] > 0.85 and epochs[1]["train_samples"] == 8000


def test_an_old_config_file_still_loads(old_run):
    proc = _cli("config", "show", "--config", str(old_run / "config.toml"), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert 'model = "bn_models:TinyBatchNormMLP"' in proc.stdout and "ema_decay = 0.99" in proc.stdout
    assert "accumulate_steps = 2" in proc.stdout


def test_an_old_run_is_listed(old_run):
    proc = _cli("status", str(old_run), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "finished" in proc.stdout and "0.8945" in proc.stdout
