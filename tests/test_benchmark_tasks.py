"""The benchmarks of any training task (tasks.py) and of DALI's own pipeline functions (tutorial.py), run end to
end with --smoke-cpu, and the tutorial's GPU function through the launcher's pre-flight on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, check_ok
from test_benchmark import bench

pytestmark = pytest.mark.slow


def test_tasks_smoke_times_each_task_against_its_step(tmp_path):
    """benchmarks/tasks.py synthesises each built-in task's data, times the task's own device call alone (the
    trainer's Parts, in a child process) and a `dali-launch train --task` run, and gives their ratio."""
    out = tmp_path / "tasks.json"
    proc = bench(
        *("--smoke-cpu", "--epochs", "2", "--calls", "2", "--data-root", str(tmp_path / "data"), "--out", str(out)),
        timeout=900,
        script=REPO / "benchmarks" / "tasks.py",
    )
    check_ok(proc)
    rows = {r["task"]: r for r in json.loads(out.read_text())["rows"]}
    assert sorted(rows) == ["contrastive", "detection", "segmentation"], rows
    for task, r in rows.items():
        assert r["step"]["images_per_s_per_device"] > 0 and r["train"]["images_per_s_per_device"] > 0, task
        assert r["ratio"] == r["train"]["images_per_s_per_device"] / r["step"]["images_per_s_per_device"]
        assert f"--task={task}" in r["train"]["argv"] and 0 <= r["train"]["data_wait_fraction"] <= 1
        assert r["step"]["input"]["images_per_s_per_device"] > 0 and 0 <= r["step"]["padding"] < 1, task
        assert r["train"]["between_epochs_s"] > 0 and len(r["train"]["checkpoint_behind_calls"]) == 2, task
    assert "segmentation" in proc.stdout and "ratio" in proc.stdout.splitlines()[0]
    assert "between s" in proc.stdout.splitlines()[0] and "decoded cache" in proc.stdout


def test_tutorial_smoke_trains_dalis_tutorial_function_in_both_modes(small_lmdb, tmp_path):
    """benchmarks/tutorial.py --smoke-cpu (gpu.sh's `tutorial` question, on the CPU twin): a `train` run and a --local
    one of DALI's tutorial function, one JSON line with each one's test accuracy, and that both trained."""
    out = tmp_path / "tutorial.json"
    proc = bench(
        "--smoke-cpu",
        "--data",
        str(small_lmdb),
        "--out",
        str(out),
        timeout=600,
        script=REPO / "benchmarks" / "tutorial.py",
    )
    check_ok(proc)
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line == json.loads(out.read_text()) and line["trained"], line
    assert [r["mode"] for r in line["runs"]] == ["train", "local"]
    assert all(r["rc"] == 0 and r["test_accuracy"] > 0.3 for r in line["runs"]), line


def test_the_tutorials_gpu_function_passes_the_checks_as_it_is(small_lmdb):
    """benchmarks/dali_tutorial_gpu.py, the tutorial with nvJPEG and labels.gpu(), defined on the CPU by the launcher's
    pre-flight for each split: recognised, its parameters filled, its reader sharded and padded; no GPU needed."""
    argv = [sys.executable, "-m", "dali_launch.launcher.cli", "--local", "--dry-run", "--data-dir", str(small_lmdb)]
    argv += ["--pipeline", "dali_tutorial_gpu:mnist_sharded_iterator"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "benchmarks")}
    check_ok(subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=300))
