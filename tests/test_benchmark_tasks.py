"""The benchmarks of any training task (tasks.py) and of DALI's own pipeline functions (tutorial.py), run end to
end with --smoke-cpu, and the GPU functions of the latter through the launcher's pre-flight on the CPU."""

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
    assert sorted(rows) == ["audio", "contrastive", "detection", "segmentation", "video"], rows
    for task, r in rows.items():
        assert r["step"]["images_per_s_per_device"] > 0 and r["train"]["images_per_s_per_device"] > 0, task
        assert r["ratio"] == r["train"]["images_per_s_per_device"] / r["step"]["images_per_s_per_device"]
        assert f"--task={task}" in r["train"]["argv"] and 0 <= r["train"]["data_wait_fraction"] <= 1
        assert r["step"]["input"]["images_per_s_per_device"] > 0 and 0 <= r["step"]["padding"] < 1, task
        assert r["train"]["between_epochs_s"] > 0 and len(r["train"]["checkpoint_behind_calls"]) == 2, task
    assert "segmentation" in proc.stdout and "ratio" in proc.stdout.splitlines()[0]
    assert "between s" in proc.stdout.splitlines()[0] and "decoded cache" in proc.stdout


def test_video_decode_smoke_reads_every_clip_on_the_cpu(tmp_path):
    """benchmarks/video_decode.py --smoke-cpu (gpu.sh's `video` question, its CPU half): data synth's clips read
    whole by DALI's video reader on the CPU, clips and frames a second in one JSON line."""
    out = tmp_path / "video.json"
    args = ("--smoke-cpu", "--batch", "4", "--epochs", "1", "--threads", "1", "--data-root", str(tmp_path), "--out")
    proc = bench(*args, str(out), timeout=300, script=REPO / "benchmarks" / "video_decode.py")
    check_ok(proc)
    doc = json.loads(out.read_text())
    assert [r["device"] for r in doc["rows"]] == ["cpu"] and doc["rows"][0]["clip"] == [12, 16, 16, 3]
    assert doc["rows"][0]["frames_per_s"] == 12 * doc["rows"][0]["clips_per_s"] > 0


def test_tutorial_smoke_trains_a_gpu_pipeline_in_every_way(small_lmdb, tmp_path):
    """benchmarks/tutorial.py --smoke-cpu (gpu.sh's `tutorial` question, on the CPU twins, outputs stood in for by
    GPU ones): the built-in pipeline, then a pipeline_def function trained through `train`, --local and the Python
    API, one JSON line with each one's test accuracy against the built-in's; every output went to JAX by DLPack,
    but the pre-flight's one sample of each output of the function, copied to the host."""
    out = tmp_path / "tutorial.json"
    proc = bench(
        *("--smoke-cpu", "--functions", "pipeline_def", "--data", str(small_lmdb), "--out", str(out)),
        timeout=900,
        script=REPO / "benchmarks" / "tutorial.py",
    )
    check_ok(proc)
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line == json.loads(out.read_text()) and line["trained"] and line["within"], line
    assert [(r["pipeline"], r["mode"]) for r in line["runs"]] == [
        ("dali_tutorial:mnist_pipeline", mode) for mode in ("train", "local", "api")
    ]
    for row in [line["builtin"], *line["runs"]]:
        counts, sampled = row["gpu_outputs"], 0 if row is line["builtin"] else 2
        assert row["rc"] == 0 and row["test_accuracy"] > 0.3, row
        assert counts.get("as_cpu", 0) == sampled and counts["dlpack"] == counts["outputs"] - sampled > 0, row
    assert all(abs(r["vs_builtin"]) <= 0.01 for r in line["runs"]), line


@pytest.mark.parametrize("function", ["mnist_sharded_iterator", "mnist_pipeline"])
def test_the_gpu_functions_pass_the_checks_as_they_are(small_lmdb, function):
    """benchmarks/dali_tutorial_gpu.py's functions (the tutorial's, with nvJPEG and labels.gpu(); a pipeline_def one
    with GPU operators after nvJPEG), defined on the CPU by the launcher's pre-flight for each split of a SLURM job
    (its tasks run on GPU nodes; `--local` here is refused, tests/test_catalogue_pipelines.py): recognised, their
    parameters filled, their reader sharded and padded; no GPU needed."""
    argv = [sys.executable, "-m", "dali_launch.launcher.cli", "--nodes", "1", "--gpus-per-node", "1", "--dry-run"]
    argv += ["--data-dir", str(small_lmdb)]
    argv += ["--pipeline", f"dali_tutorial_gpu:{function}"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "benchmarks")}
    env.pop("SLURM_CONF", None)  # no cluster's own checks: the test cluster's partition has no GPUs
    check_ok(subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=300))
