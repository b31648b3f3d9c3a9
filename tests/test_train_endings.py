"""How a `dali-launch train` run is told while it runs and when it ends, with real signals: `status` says its
start-up phase, then its epoch and step; Ctrl-C twice is an interrupted run, as under --local; a cancel is
said once."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import check_ok, dali_launch, reap, start, wait_for
from run_readers import only_run

from dali_launch.trainer.resilience import saved

pytestmark = pytest.mark.slow


def _status(root) -> str:
    return dali_launch("status", str(only_run(root).root)).stdout if root.exists() and any(root.iterdir()) else ""


def test_status_says_the_start_up_then_the_step_and_ctrl_c_twice_is_interrupted(mnist_lmdb, tmp_path):
    """Before, `status` said only "running" until the first epoch ended, and a second Ctrl-C was recorded as
    `failed (no rank said why)`. One epoch of 4,000 steps, its only sync point at its end: the first SIGINT
    waits there, the second comes while it waits."""
    root = tmp_path / "runs"
    run = ["--epochs", "1", "--global-batch-size", "2", "--sync-every-steps", "100000", "--data-dir", str(mnist_lmdb)]
    proc, seen = start("train", "--platform", "cpu", *run, "--run-root", str(root)), []
    try:
        stepping = lambda: seen.append(_status(root)) or "running (epoch 0, step " in seen[-1]
        wait_for(stepping, timeout_s=180)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)  # the first is taken (the kernel merges a pending second into it)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        reap(proc)
    paths = only_run(root)
    started = next(s for s in seen if ": running (" in s)
    assert ": running (starting: " in started and ", for " in started, seen  # a start-up phase, and how long
    assert " of 4,000); run directory " in seen[-1], seen[-1]
    assert proc.returncode == 130 and err.strip().endswith("SIGINT again; exiting without a checkpoint"), err
    status = dali_launch("status", str(paths.root))
    check_ok(status)
    assert status.stdout == (
        f"run {paths.root.name}: interrupted (rank 0 was stopped by a second SIGINT, before it checkpointed); run "
        f"directory {paths.root}\n"
    ), status.stdout


def test_a_cancelled_train_run_is_said_cancelled_once(small_lmdb, tmp_path):
    """`dali-launch cancel`: the task checkpoints and stops, and the console says so in one line, the cancel's.
    Before, it said `stopped by SIGTERM` as well."""
    root, console = tmp_path / "runs", tmp_path / "console.txt"
    with console.open("w") as out:
        proc = start("train", "--platform", "cpu", "--epochs", "500", "--data-dir", str(small_lmdb), "--run-root", str(root), stdout=out)  # fmt: skip
    try:
        wait_for(lambda: root.exists() and any(root.glob("*/metrics.jsonl")), timeout_s=180)
        cancelled = dali_launch("cancel", str(only_run(root).root), timeout=150)
        _, err = proc.communicate(timeout=60)
    finally:
        reap(proc)
    check_ok(cancelled)
    paths = only_run(root)
    step, said = saved.newest(paths).step, console.read_text() + err
    assert proc.returncode == 0 and "stopped by SIGTERM" not in said, said
    ends = [line for line in said.splitlines() if "checkpoint written" in line]
    assert ends == [
        f"cancelled (`dali-launch cancel`); checkpoint written at step {step}; resume with `dali-launch --resume "
        f"{paths.root}`"
    ], said
