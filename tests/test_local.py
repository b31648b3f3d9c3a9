"""Local mode: real jax.distributed processes on this machine, through `dali-launch --local`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import alive, check_ok, dali_launch, descendants, reap, start, wait_for
from run_readers import assert_same_params, only_run, rank_pid, rank_report

from dali_launch.trainer.config import DistributedConfig, Layout, TaskSpec
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths, write_atomic

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]
FOREVER = ["--local", "--gpus-per-node", "2", "--processes", "2", "--epochs", "50"]  # stopped long before its end


def _result(run_root):
    paths = only_run(run_root)
    return paths, json.loads(paths.result.read_text())


def test_two_processes_match_one_process(small_lmdb, tmp_path):
    """2 processes × 2 CPU devices vs 1 process × 2 devices with 2 readers each, both at a global batch of
    200: the same 4 DALI shards, so each step averages the same 200 samples and both train the same
    parameters (within run_readers.PARAMS_*TOL). The full Fashion-MNIST over 2 processes × 2 devices is
    test_slurm.py's two-node run; small_lmdb's 4 steps an epoch are what the tolerance allows."""
    common = ["--data-dir", str(small_lmdb), "--epochs", "1", "--global-batch-size", "200"]
    single = dali_launch(
        "train", "--gpus-per-node", "2", "--readers-per-device", "2", *common, "--run-root", str(tmp_path / "one")
    )
    check_ok(single)
    multi = dali_launch(
        "--local",
        "--nodes",
        "1",
        "--gpus-per-node",
        "4",
        "--processes",
        "2",
        "--init-timeout-s",
        "60",
        *common,
        "--run-root",
        str(tmp_path / "two"),
    )
    check_ok(multi)
    one_paths, _ = _result(tmp_path / "one")
    paths, two = _result(tmp_path / "two")
    # One process sums 100 rows a device over 2 devices, the other 50 over 4: the biases (~5e-3 after 4 steps)
    # parted by up to 1.5e-5 here, against 1e-3 when the one process read 2 shards (another sample order).
    assert_same_params(one_paths, paths, atol=1e-4)
    assert len(two["checksums"]) == 4 and len(set(two["checksums"])) == 1  # every replica, every process
    assert two["final"]["train_samples"] == 800 and two["final"]["test_count"] == 200
    ranks = json.loads(paths.rank_map.read_text())
    assert [r["device_indices"] for r in ranks] == [[0, 1], [2, 3]] and ranks[1]["num_devices"] == 4
    assert ranks[1]["devices"] == ["cpu:2048", "cpu:2049"]  # JAX's ids; shards never follow them
    assert {r["resolved"]["parallel"] for r in ranks} == {"sharded"}  # --parallel auto: no BatchNorm
    assert {r["resolved"]["checkpoint_async"] for r in ranks} == {False}  # auto: the MLP's 20 MiB in the foreground
    assert "[rank 1]" in multi.stdout and "[rank 0] epoch 0:" in multi.stdout
    assert all(paths.log(r).read_text() for r in range(2))


@pytest.fixture(scope="module")
def sharded_two(small_lmdb, tmp_path_factory):
    """One epoch of small_lmdb on 1 process × 2 devices and, --parallel sharded, on 2 processes × 1 device (4 steps
    a call): the sharded test's two runs; the resume test continues a copy of the second."""
    root = tmp_path_factory.mktemp("sharded-two")
    common = ["--data-dir", str(small_lmdb), "--epochs", "1", "--gpus-per-node", "2", "--steps-per-call", "4"]
    check_ok(dali_launch("train", *common, "--run-root", str(root / "one")))
    multi = dali_launch(
        "--local",
        "--processes",
        "2",
        "--parallel",
        "sharded",
        "--init-timeout-s",
        "60",
        *common,
        "--run-root",
        str(root / "two"),
    )
    check_ok(multi)
    return root, multi


def test_sharded_mode_across_processes_matches_one_process(sharded_two):
    """--parallel sharded over 2 processes × 1 CPU device: one jit program whose all-reduce crosses
    processes (gloo) trains the parameters of pmap in one process with 2 devices (within
    run_readers.PARAMS_*TOL: two programs), and keeps both processes' replicas bit-identical."""
    root, multi = sharded_two
    (one_paths, _), (paths, two) = _result(root / "one"), _result(root / "two")
    # Each rank's start line under its own prefix; gloo's connection lines only in the logs
    assert "[rank 1] rank 1 on " in multi.stdout and "[rank 0] rank 1 on " not in multi.stdout
    # none of gloo's pieces either, which it writes one by one: another line could cut them apart
    assert (
        "[Gloo]" not in multi.stdout and "peer ranks" not in multi.stdout and "[Gloo] Rank" in paths.log(1).read_text()
    )
    assert len(two["checksums"]) == 2 and len(set(two["checksums"])) == 1
    assert two["final"]["train_samples"] == 800
    assert_same_params(one_paths, paths)
    # Where launch -> first step went, phase by phase, in order
    first = json.loads(paths.metrics.read_text().splitlines()[0])
    assert first["startup_since"] == "launch" and list(first["startup"]) == [
        "jax initialized",
        "imports",
        "checkpoints read",
        "pipelines built",
        "model initialised",
        "first step",
    ]
    times = list(first["startup"].values())
    assert times == sorted(times) and first["first_step_s"] == times[-1] > 0


def test_kill_9_of_one_rank_stops_the_job(mnist_lmdb, tmp_path):
    """...and takes the DALI workers that read its global order (--feed-workers): nothing outlives the job."""
    args = ["--sample-order", "global", "--feed-workers", "1"]
    proc = start(*FOREVER, *args, "--data-dir", str(mnist_lmdb), "--run-root", str(tmp_path))
    workers = set()
    try:
        pid = rank_pid(tmp_path, 1)
        time.sleep(3)  # mid-epoch
        workers = descendants(pid)
        assert workers, "rank 1 started no DALI workers"
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - killed_at < 30
        wait_for(lambda: not any(alive(w) for w in workers), timeout_s=30)
    finally:
        reap(proc, workers)
    assert proc.returncode != 0 and "rank 1 was killed by SIGKILL" in err, err
    rank0 = rank_report(tmp_path, 0)["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(rank0, 0)


def test_a_rank_that_never_starts_is_a_clear_timeout(tmp_path):
    """Process 0 of 2 waits for a peer that never comes: bounded, and the error names it (its watchdog, which
    runs from the start, says so as the coordinator's wait ends)."""
    spec = TaskSpec(
        run_dir=str(tmp_path),
        distributed=DistributedConfig(platform="cpu", init_timeout_s=5),
        layout=Layout(backend="local", num_processes=2, local_device_count=1),
    )
    write_atomic(RunPaths(tmp_path).config, spec.to_json())
    env = {
        **os.environ,
        "DALI_LAUNCH_PROCESS_ID": "0",
        "DALI_LAUNCH_NUM_PROCESSES": "2",
        "DALI_LAUNCH_LOCAL_RANK": "0",
        "DALI_LAUNCH_COORDINATOR": "127.0.0.1:29517",
    }
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dali_launch.trainer", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode != 0 and time.monotonic() - start < 60
    assert re.search(r"rank 1 never started: no heartbeat from it in \d+ s \(--init-timeout-s 5\)", proc.stderr), (
        proc.stderr
    )


def test_a_local_run_resumes_from_its_directory_and_reports_itself(sharded_two, tmp_path):
    """`dali-launch --resume RUN` of a local run (a copy of the sharded test's 2-process run, one epoch) needs no
    other flag and runs locally again; status and logs read a local run from its directory."""
    root, _ = sharded_two
    run = only_run(root / "two").root
    paths = RunPaths(shutil.copytree(run, tmp_path / "runs" / run.name))
    resumed = dali_launch("--resume", str(paths.root), "--epochs", "2")
    check_ok(resumed)
    assert f"resuming {paths.root} (started by `dali-launch --local`); changed: --epochs 2" in resumed.stdout
    assert "[rank 1]" in resumed.stdout and "after 2 epochs; 2 replicas identical" in resumed.stdout
    assert [json.loads(line)["epoch"] for line in paths.metrics.read_text().splitlines()] == [0, 1]
    status = dali_launch("status", str(paths.root))
    check_ok(status)
    assert status.stdout.startswith(f"run {paths.root.name}: finished; epoch 1 test accuracy")
    logs = dali_launch("logs", str(paths.root), "--follow")
    check_ok(logs)
    assert "\n[rank 1] " in logs.stdout and "[rank 0] epoch 1:" in logs.stdout


def test_status_logs_and_cancel_of_a_running_local_run_by_its_name(mnist_lmdb, tmp_path):
    """`status`, `logs` and `cancel` take the run's name as `runs` lists it. Cancelled, the ranks checkpoint
    and stop; the launcher following the run says so (the step, how to resume) and exits 0, as `cancel` does;
    every command then calls the run `cancelled`."""
    console = tmp_path / "launcher.out"
    root = tmp_path / "runs"
    with console.open("w") as out:
        proc = start(*FOREVER, "--data-dir", str(mnist_lmdb), "--run-root", str(root), stdout=out)
    try:
        wait_for(lambda: rank_report(root, 1), timeout_s=120)
        paths = only_run(root)
        by_name = [paths.root.name, "--run-root", str(root)]
        assert f"run {paths.root.name}: running" in dali_launch("status", *by_name).stdout
        assert "[rank 1] " in dali_launch("logs", *by_name).stdout
        cancelled = dali_launch("cancel", *by_name, timeout=150)
        _, err = proc.communicate(timeout=60)
    finally:
        reap(proc)
    check_ok(cancelled)
    said = cancelled.stdout.splitlines()
    assert said[0] == f"stopping run {paths.root.name} (SIGTERM to 2 processes)", cancelled.stdout
    step = saved.newest(paths).step
    assert (
        said[-1]
        == f"run {paths.root.name}: cancelled; resume from step {step} with `dali-launch --resume {paths.root}`"
    )
    assert proc.returncode == 0 and "a rank failed" not in err, err
    assert (
        f"cancelled (`dali-launch cancel`); checkpoint written at step {step}; resume with `dali-launch --resume "
        f"{paths.root}`" in console.read_text()
    )
    assert f"run {paths.root.name}: cancelled" in dali_launch("status", str(paths.root)).stdout
    [row] = json.loads(dali_launch("runs", str(root), "--json").stdout)
    assert row["state"] == "cancelled"
