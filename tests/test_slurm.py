"""`dali-launch --nodes N` on a real SLURM cluster (slurm/cluster.sh): sbatch -> srun -> submitit -> JAX."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import check_ok, dali_launch, wait_for
from run_readers import only_run

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.multiprocess]
CPU_JOB = ["--nodes", "2", "--gpus-per-node", "2", "--platform", "cpu", "--time-min", "15"]


def test_two_nodes_train_fashion_mnist(slurm_env, fashion_subset, tmp_path):
    """The job of the README's first line, on 2 nodes × 2 devices of the test cluster: real Fashion-MNIST
    classes (6,000 of its images: the whole set took 37 s an epoch on CI's two cores), every sample each
    epoch, one result back at the submitter, 4 identical replicas; 2 epochs reach 0.81 here."""
    proc = dali_launch(
        *CPU_JOB, "--epochs", "2", "--data-dir", str(fashion_subset), "--run-root", str(tmp_path), env=slurm_env
    )
    check_ok(proc)
    paths = only_run(tmp_path)
    result = json.loads(paths.result.read_text())
    assert result["final"]["test_accuracy"] >= 0.75 and result["final"]["test_count"] == 1_000
    assert [json.loads(line)["train_samples"] for line in paths.metrics.read_text().splitlines()] == [6_000, 6_000]
    assert len(result["checksums"]) == 4 and len(set(result["checksums"])) == 1
    assert f"done: test accuracy {result['final']['test_accuracy']:.4f}" in proc.stdout  # back at the submitter
    ranks = json.loads(paths.rank_map.read_text())
    assert [(r["host"], r["device_indices"]) for r in ranks] == [("node1", [0, 1]), ("node2", [2, 3])]


def test_one_task_per_gpu_and_dry_run_is_what_is_submitted(slurm_env, small_lmdb, tmp_path):
    args = [
        *CPU_JOB,
        "--tasks-per-node",
        "2",
        "--epochs",
        "1",
        "--data-dir",
        str(small_lmdb),
        "--setup",
        "echo 'setup ran; $HOME stays literal'",
    ]
    dry = dali_launch(*args, "--dry-run", "--run-root", str(tmp_path), env=slurm_env)
    check_ok(dry)
    assert not any(tmp_path.iterdir()), "a dry run wrote a run directory"
    proc = dali_launch(*args, "--run-root", str(tmp_path), env=slurm_env)
    check_ok(proc)
    paths = only_run(tmp_path)
    job_id = json.loads((paths.root / "job.json").read_text())["job_id"]
    submitted = (paths.submitit / job_id / f"{job_id}_submission.sh").read_text()
    planned = dry.stdout[dry.stdout.index("#!/bin/bash") :].replace(str(tmp_path / "RUN_DIR"), str(paths.root))
    assert planned.strip() == submitted.strip()
    assert "echo 'setup ran; $HOME stays literal'" in submitted
    ranks = json.loads(paths.rank_map.read_text())
    assert [(r["host"], len(r["devices"]), r["device_indices"]) for r in ranks] == [
        ("node1", 1, [0]),
        ("node1", 1, [1]),
        ("node2", 1, [2]),
        ("node2", 1, [3]),
    ]
    assert "process 3: node 1 task 1 devices [1], job devices [3]" in dry.stdout


def test_status_logs_and_cancel_a_live_job(slurm_env, mnist_lmdb, tmp_path):
    common = ["--run-root", str(tmp_path)]
    proc = dali_launch(*CPU_JOB, "--epochs", "200", "--data-dir", str(mnist_lmdb), "--detach", *common, env=slurm_env)
    check_ok(proc)
    job_id = proc.stdout.split("submitted job ")[1].split(";")[0]
    paths = only_run(tmp_path)
    wait_for(lambda: paths.metrics.exists(), timeout_s=120)
    status = dali_launch("status", job_id, *common, env=slurm_env)
    check_ok(status)
    # running, what it does (an epoch's step, or between epochs), then the last epoch's headline
    assert re.search(rf"job {job_id}: running( \([^)]*\))?; epoch 0 test accuracy", status.stdout), status.stdout
    logs = dali_launch("logs", job_id, *common, env=slurm_env)
    assert "[rank 0] epoch 0: loss" in logs.stdout and "[rank 1]" in logs.stdout
    one = dali_launch("logs", str(paths.root), "--rank", "1", *common, env=slurm_env)
    assert "[rank" not in one.stdout and "Starting with JobEnvironment" in one.stdout
    check_ok(dali_launch("cancel", job_id, *common, env=slurm_env))
    wait_for(lambda: ": cancelled" in dali_launch("status", job_id, *common, env=slurm_env).stdout, timeout_s=60)


def test_a_cancelled_job_ends_the_follow_loop(slurm_env, small_lmdb, tmp_path):
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dali_launch.launcher.cli",
            *CPU_JOB,
            "--epochs",
            "2000",  # the 800 digits' epochs: running still when the test cancels it
            "--data-dir",
            str(small_lmdb),
            "--run-root",
            str(tmp_path),
        ],
        env={**os.environ, **slurm_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: any(tmp_path.glob("*/metrics.jsonl")), timeout_s=120)
        job_id = json.loads(next(tmp_path.glob("*/job.json")).read_text())["job_id"]
        check_ok(dali_launch("cancel", job_id, "--run-root", str(tmp_path), env=slurm_env))
        _, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == 1 and f"job {job_id} ended without a result" in err, err


def test_a_failing_task_surfaces_its_traceback(slurm_env, small_lmdb, tmp_path):
    """The data set vanishes between submission and start (a scratch purge): the task's own error comes back."""
    data = tmp_path / "scratch"
    shutil.copytree(small_lmdb, data)
    proc = dali_launch(
        *CPU_JOB,
        "--data-dir",
        str(data),
        "--run-root",
        str(tmp_path / "runs"),
        "--setup",
        f"rm -rf {data}/training",
        env=slurm_env,
    )
    assert proc.returncode == 1
    # every rank fails alike; the first to fail (either) is named with its own error, in one line
    assert re.search(r"^dali-launch: rank [01] failed: .*training: No such file or directory", proc.stderr, re.M), (
        proc.stderr
    )
    assert "training" in proc.stderr.split("Traceback")[-1]


def test_cluster_ci_writes_junit_with_real_results(slurm_env, mnist_lmdb, small_lmdb, tmp_path):
    """`dali-launch ci` against the local cluster: pytest on a node plus a 2-node training run."""
    import xml.etree.ElementTree as ET

    junit = tmp_path / "ci.xml"
    proc = dali_launch(
        "ci",
        *CPU_JOB,
        "--data-dir",
        str(mnist_lmdb),
        "--run-root",
        str(tmp_path / "runs"),
        "--tests",
        "tests/test_flavours.py tests/test_topology.py",
        "--pytest-args",
        "-q",
        "--min-accuracy",
        "0.85",
        "--junit",
        str(junit),
        env=slurm_env,
        timeout=1200,  # 24 s here, 494 s on a CI machine: two jobs at once on 2 cores
    )
    check_ok(proc)
    suites = {s.get("name"): s for s in ET.parse(junit).getroot()}
    training = suites.pop("dali-launch.training")
    assert [c.get("name") for c in training] == ["rank-0", "rank-1", "accuracy"] and training.get("failures") == "0"
    (pytest_suite,) = suites.values()
    assert int(pytest_suite.get("tests")) >= 10 and pytest_suite.get("failures") == "0"
    assert "training rank 1: exit 0" in proc.stdout and "test job: exit 0" in proc.stdout
    bad = dali_launch(  # 800 digits: no accuracy near 0.999
        "ci",
        *CPU_JOB,
        "--data-dir",
        str(small_lmdb),
        "--run-root",
        str(tmp_path / "runs"),
        "--tests",
        "tests/test_flavours.py",
        "--pytest-args",
        "-q -k mismatches",
        "--min-accuracy",
        "0.999",
        "--junit",
        str(junit),
        env=slurm_env,
        timeout=1200,
    )
    assert bad.returncode == 1
    accuracy = ET.parse(junit).getroot().find("testsuite[@name='dali-launch.training']/testcase[@name='accuracy']")
    assert "below --min-accuracy 0.999" in accuracy.find("failure").text
