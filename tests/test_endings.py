"""How a local job ends: real launchers, real ranks (2 processes × 1 CPU device), real signals and deaths.

The launcher dies: its ranks die with it. A rank raises: the job stops within seconds and names it
first. SIGINT/SIGTERM/SIGUSR2: the ranks checkpoint and stop, and a resumed run appends to the logs
and times its partial epoch honestly. A running run refuses `--resume`. A closed console is no failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from conftest import alive, check_ok, dali_launch, descendants, reap, start, wait_for
from run_readers import has_checkpoint, only_run, rank_pid

from dali_launch.launcher.route import resume
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import saved

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]
LOCAL = ["--local", "--gpus-per-node", "2", "--processes", "2", "--init-timeout-s", "30"]

FAILING = """
import itertools

import flax.linen as nn
import jax

_calls = itertools.count()


def _fail_on_rank_1(x):
    if jax.process_index() == 1 and next(_calls) >= 15:
        raise RuntimeError("rank 1 fails mid-epoch (injected)")


class Failing(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        jax.debug.callback(_fail_on_rank_1, x[0, 0])  # runs on the host at every step
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


def at_start(num_classes):
    if jax.process_index() == 1:
        raise RuntimeError("rank 1 cannot build its model (injected)")
    return Failing(num_classes=num_classes)


def mid_epoch(num_classes):
    return Failing(num_classes=num_classes)
"""


def _start(args, root, env=None) -> subprocess.Popen:
    return start(*LOCAL, *args, "--run-root", str(root), env=env)


def _unlocked(paths) -> bool:
    try:
        resume.refuse_live(paths)
    except UsageError:
        return False
    return True


def _rank_pids(root) -> list[int]:
    return [rank_pid(root, r) for r in range(2)]


def _feed_workers(pid: int) -> list[int]:
    """The DALI feed workers a rank spawned (multiprocessing's spawn_main) among the processes below it."""
    try:
        below = descendants(pid)
    except OSError:  # the rank itself is gone
        return []
    return [c for c in below if b"spawn_main" in _cmdline(c)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize("how", ["kill -9", "kill -9 of its process group"])
def test_a_killed_launcher_takes_its_ranks_and_unlocks_the_run(mnist_lmdb, tmp_path, how):
    """While it runs, the run refuses --resume (one line, exit 2); the launcher's SIGKILL ends every
    rank within seconds (PR_SET_PDEATHSIG), and the run can be resumed again. A plain kill -9 reaches the
    launcher alone: the ranks' DALI feed workers (--sample-order global) end with the ranks, as they do."""
    feeding = ["--sample-order", "global", "--feed-workers", "1"] if how == "kill -9" else []
    proc = _start(["--epochs", "50", "--data-dir", str(mnist_lmdb), *feeding], tmp_path)
    pids = []
    try:
        pids = _rank_pids(tmp_path)
        if feeding:  # every rank's worker started, before anything is killed
            wait_for(lambda: all(_feed_workers(pid) for pid in pids), timeout_s=60)
            pids += [w for pid in pids for w in _feed_workers(pid)]
        paths = only_run(tmp_path)
        started = time.monotonic()
        refused = dali_launch(*LOCAL, "--resume", str(paths.root), timeout=60)
        assert refused.returncode == 2 and time.monotonic() - started < 30, refused
        assert refused.stderr.count("\n") == 1 and "a job is still running in it" in refused.stderr, refused.stderr
        assert "resuming" not in refused.stdout and not any("--- resumed" in paths.log(r).read_text() for r in range(2))
        (os.killpg if "group" in how else os.kill)(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout_s=30)
        print(f"{how}: every rank (and feed worker) gone {time.monotonic() - killed:.2f} s after the launcher")
        wait_for(lambda: _unlocked(paths), timeout_s=10)  # the kernel dropped the locks with their holders
    finally:
        reap(proc, pids)


def test_ctrl_c_checkpoints_and_the_resumed_run_appends(mnist_lmdb, tmp_path):
    """SIGINT to the launcher: every rank checkpoints at the next sync point and stops; the launcher
    says where and how to resume. The resumed run appends to the ranks' logs, and its first, partial
    epoch reports the images and time of its own part. Rank 1's programs, which it writes itself (JAX
    writes process 0's), were written as it stopped mid-epoch: the resumed rank 1 compiles no step."""
    # 80 calls an epoch; the signal comes once a checkpoint at call 20 shows epoch 0 under way
    run = ["--epochs", "2", "--checkpoint-every-steps", "20", "--data-dir", str(mnist_lmdb)]
    proc = _start([*run, "--compile-cache", str(tmp_path / "xla")], tmp_path / "runs")
    try:
        pids = _rank_pids(tmp_path / "runs")
        wait_for(lambda: has_checkpoint(tmp_path / "runs"), timeout_s=120)
        proc.send_signal(signal.SIGINT)
        asked = time.monotonic()
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - asked
    finally:
        reap(proc)
    print(f"SIGINT: launcher done {took:.2f} s later")
    paths = only_run(tmp_path / "runs")
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 130 and last.startswith(
        "dali-launch: interrupted (SIGINT); checkpoint written at step "
    ), err
    assert took < 30 and not any(alive(pid) for pid in pids)
    assert not paths.result.exists() and any(p.name.isdigit() for p in paths.checkpoints.iterdir())
    first_logs = [paths.log(r).read_text() for r in range(2)]

    command = shlex.split(last.split("resume with `")[1].rstrip("`"))
    assert command[0] == "dali-launch"
    resumed = dali_launch(*command[1:], env={"JAX_EXPLAIN_CACHE_MISSES": "1"})
    check_ok(resumed)
    assert "resumed from checkpoint" in resumed.stdout
    for rank, before in enumerate(first_logs):
        log = paths.log(rank).read_text()
        assert (
            log.startswith(before) and "--- resumed" in log[len(before) :] and f"rank {rank} on" in log[len(before) :]
        )
        missed = re.findall(r"PERSISTENT COMPILATION CACHE MISS for '(jit_\w+)'", log[len(before) :])
        assert "jit_sharded_call" not in missed, (rank, missed)
    metrics = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [0, 1] and metrics[1]["resumed_at_call"] is None
    partial = metrics[0]
    calls = partial["resumed_at_call"]
    assert 20 <= calls < 80  # 8,000 samples / (50 × 2 devices) calls per epoch, 100 samples each
    own = partial["images_per_s"] * partial["epoch_time_s"]
    assert abs(own - (8000 - calls * 100)) < 1 and partial["train_samples"] == 8000


def test_ctrl_c_twice_kills_the_ranks_and_the_run_is_interrupted_everywhere(mnist_lmdb, tmp_path):
    """A second SIGINT kills the ranks before they checkpoint: the launcher said "interrupted", but `status`
    and `runs` called the run failed ("no rank said why"), as nothing was recorded of the ranks it killed."""
    run = ["--epochs", "2", "--checkpoint-every-steps", "20", "--data-dir", str(mnist_lmdb)]
    proc = _start(run, tmp_path / "runs")
    try:
        wait_for(lambda: has_checkpoint(tmp_path / "runs"), timeout_s=120)
        proc.send_signal(signal.SIGINT)
        said = [proc.stderr.readline()]  # the second once the first was taken (the kernel merges pending ones)
        while "asking every rank to checkpoint and stop" not in said[-1] and said[-1]:
            said.append(proc.stderr.readline())
        proc.send_signal(signal.SIGINT)
        err = "".join(said) + proc.communicate(timeout=60)[1]
    finally:
        reap(proc)
    paths = only_run(tmp_path / "runs")
    step = saved.newest(paths).step
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == (
        f"dali-launch: interrupted (SIGINT); killed the ranks before they checkpointed; the newest checkpoint is "
        f"step {step}; resume with `dali-launch --resume {paths.root}`"
    ), err
    status = dali_launch("status", str(paths.root))
    check_ok(status)
    assert status.stdout == (
        f"run {paths.root.name}: interrupted (rank 0 was killed by a second SIGINT, before it checkpointed); resume "
        f"from step {step} with `dali-launch --resume {paths.root}`; run directory {paths.root}\n"
    ), status.stdout
    [row] = json.loads(dali_launch("runs", str(tmp_path / "runs"), "--json").stdout)
    assert row["state"] == "interrupted"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2], ids=["SIGTERM", "SIGUSR2"])
def test_a_job_that_finishes_within_the_grace_is_reported_finished(small_lmdb, tmp_path, sig):
    """A one-epoch run with no sync point inside its epoch (800 digits: 1 fused call of 8 steps): asked to
    stop once both ranks are up, it finishes instead, and says so (exit 0)."""
    proc = _start(
        ["--epochs", "1", "--steps-per-call", "8", "--sync-every-steps", "1000", "--data-dir", str(small_lmdb)],
        tmp_path,
    )
    try:
        _rank_pids(tmp_path)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        reap(proc)
    assert proc.returncode == 0, err
    assert f"dali-launch: {sig.name}: asking every rank to checkpoint and stop" in err
    assert "done: test accuracy" in out and "interrupted" not in err


@pytest.mark.parametrize("when", ["at_start", "mid_epoch"])
def test_a_rank_that_raises_stops_the_job_and_is_named_first(mnist_lmdb, tmp_path, when):
    """Rank 1 raises (building its model, or in its 16th step); rank 0 waits for it in a barrier or a
    collective. Within seconds the job is over and the first line names rank 1 and its error."""
    package = tmp_path / "code"
    package.mkdir()
    (package / "failing.py").write_text(textwrap.dedent(FAILING))
    # pmap: each device's program calls the model's host callback with its own rows, so rank 1's runs
    # there (under one jit over the mesh, which process runs it is XLA's choice)
    proc = _start(
        ["--epochs", "2", "--model", f"failing:{when}", "--parallel", "pmap", "--data-dir", str(mnist_lmdb)],
        tmp_path / "runs",
        env={"PYTHONPATH": str(package)},
    )
    try:
        _, err = proc.communicate(timeout=150)
        ended = time.time()
    finally:
        reap(proc)
    endings = [json.loads(p.read_text()) for p in only_run(tmp_path / "runs").endings.iterdir()]
    failed_at = min(e["at"] for e in endings if e["rank"] == 1)
    lines = err.strip().splitlines()
    what = {"at_start": "cannot build its model", "mid_epoch": "fails mid-epoch"}[when]
    assert proc.returncode == 1 and lines[0].startswith("dali-launch: rank 1 failed: ") and what in lines[0], err
    assert f"RuntimeError: rank 1 {what}" in err
    # a factory that raises is a usage error of its own (one line); an error mid-epoch comes with its traceback
    assert ("Traceback" in err) == (when == "mid_epoch")
    # From rank 1's failure (its own clock, this machine's) to the launcher's end: not JAX's 300 s barrier.
    print(f"{when}: job over {ended - failed_at:.2f} s after rank 1 failed")
    assert ended - failed_at < 30


def test_a_closed_console_is_no_failure_of_the_job(small_lmdb, tmp_path):
    """`dali-launch --local ... | head -n 2`: no BrokenPipeError, the logs complete, exit code 0 (the ranks'
    start lines, the epoch's and the summary come after the console closed)."""
    proc = _start(["--epochs", "1", "--data-dir", str(small_lmdb)], tmp_path)
    try:
        head = [proc.stdout.readline() for _ in range(2)]
        proc.stdout.close()  # what `head` does once it has its lines
        err = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        reap(proc)
    assert proc.returncode == 0 and "Traceback" not in err and "BrokenPipe" not in err, err
    assert head[0].startswith("run directory: ")
    paths = only_run(tmp_path)
    logs = [paths.log(r).read_text() for r in range(2)]
    assert "epoch 0: loss" in logs[0] and paths.result.exists()
    assert all(f"rank {r} on " in logs[r] and "[Gloo] Rank" in logs[r] for r in range(2))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_trains_process_group_stops_it_with_a_checkpoint_past_its_feed_workers(
    mnist_lmdb, tmp_path, signum
):
    """A terminal's Ctrl-C reaches every process of its foreground group, and so may a SIGTERM: `train`'s DALI
    feed workers (--sample-order global) are out of that group, so the rank alone answers: one line, a
    checkpoint, exit 128 + the signal, its workers gone. Before, the workers died of it first: the rank
    printed their tracebacks and failed without a checkpoint, or hung."""
    run = ["--epochs", "2", "--batch-size", "25", "--checkpoint-every-steps", "20", "--data-dir", str(mnist_lmdb)]
    feeding = ["--sample-order", "global", "--feed-workers", "1"]
    proc = start("train", *run, *feeding, "--run-root", str(tmp_path / "runs"))
    workers = []
    try:
        workers = wait_for(lambda: _feed_workers(proc.pid), timeout_s=60)
        wait_for(lambda: has_checkpoint(tmp_path / "runs"), timeout_s=120)
        os.killpg(proc.pid, signum)
        asked = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        reap(proc, workers)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"dali-launch: stopped by {name}; checkpoint written at step "), err
    assert took < 30 and not any(alive(pid) for pid in workers)


def test_a_rank_stopped_in_its_start_up_is_named_within_the_watchdogs_time(small_lmdb, tmp_path):
    """Rank 1 is SIGSTOPped as soon as it says it is alive, in its first lines, before the task's imports and
    so before it reaches the coordinator: the job ends within --watchdog-s and a few beats, not at
    --init-timeout-s (the whole 120 s by default held it before, 123 s seen), and its first line names rank 1,
    its pid and host, and how far it got (before: "a rank did not start", no rank named)."""
    args = ["--local", "--gpus-per-node", "2", "--processes", "2", "--epochs", "1", "--watchdog-s", "10"]
    proc = start(*args, "--init-timeout-s", "90", "--data-dir", str(small_lmdb), "--run-root", str(tmp_path))
    pid = None
    try:
        heartbeat = wait_for(lambda: next(tmp_path.glob("*/heartbeats/rank-1"), None), timeout_s=60)
        pid = wait_for(lambda: _said(heartbeat).get("pid"), timeout_s=10)
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - stopped_at
    finally:
        reap(proc, [pid] if pid else [])
    print(f"rank 1 stopped in its start-up: the job was over {took:.1f} s later (--watchdog-s 10)")
    first = err.strip().splitlines()[0]
    assert re.fullmatch(
        rf"dali-launch: rank 1 \(pid {pid} on \S+\) made no progress for \d+ s \(stopped, hung or dead; --watchdog-s "
        r"10\), before every rank reached the coordinator",
        first,
    ), err
    assert proc.returncode == 1 and took < 30, err
    assert not alive(pid)


def _said(heartbeat: Path) -> dict:
    try:
        return json.loads(heartbeat.read_text())
    except (OSError, ValueError):
        return {}
