"""Never lose work: preemption -> checkpoint -> resume gives the uninterrupted run's parameters;
stopped or killed ranks stop the job within the watchdog's bound."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest
from conftest import check_ok, dali_launch, kill_when, reap, squeue, start, stop_when, wait_for
from run_readers import has_checkpoint, only_run, rank_pid, rank_report, seen_prints, whole_checkpoints

from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths

pytestmark = [pytest.mark.slow]


def _result(paths: RunPaths) -> dict:
    return json.loads(paths.result.read_text())


@pytest.mark.parametrize(
    "mode", [[], ["--parallel", "sharded", "--readers-per-device", "2"]], ids=["pmap", "sharded-2-readers"]
)
def test_preempted_run_resumes_to_the_same_parameters(mnist_lmdb, tmp_path, mode):
    """SIGUSR2 mid-epoch (what SLURM sends before a time limit): checkpoint, exit; --resume finishes
    with the parameters of a run never interrupted, every sample seen once per epoch."""
    common = ["--data-dir", str(mnist_lmdb), "--checkpoint-every-steps", "0", *mode]
    _preempt_and_resume(tmp_path, common, lambda: rank_report(tmp_path / "cut", 0), after_s=2)  # well into epoch 0


# issue 31's augmentation in DALI (its random choices through DALI's conditionals) and mixing in the step
AUGMENTED = ["--augment", "randaugment", "--mixup", "0.2", "--cutmix", "1.0", "--label-smoothing", "0.1"]


@pytest.mark.parametrize("fmt, extra", [("tfrecord", AUGMENTED), ("webdataset", [])], ids=["tfrecord", "webdataset"])
def test_preempted_run_of_each_format_resumes_to_the_same_parameters(synth_sets, tmp_path, fmt, extra):
    """The same for the sharded formats, random crops and flips included: DALI's checkpoints hold
    readers.tfrecord's and readers.webdataset's positions and shuffling, and the augmentation's RNG
    (tfrecord's run also with RandAugment, mixup and cutmix: their states are DALI's and the step's).
    Their epochs are short (210 samples): the signal follows the first step checkpoint."""
    common = [
        "--data-dir",
        str(synth_sets[fmt]),
        "--pipeline",
        fmt,
        *["--model", "cnn", "--image-size", "32", "--num-classes", "4", "--batch-size", "4"],
        *["--learning-rate", "0.01", "--checkpoint-every-steps", "5", *extra],
    ]
    _preempt_and_resume(tmp_path, common, lambda: has_checkpoint(tmp_path / "cut"))


def test_kill_9_while_a_checkpoint_is_written_resumes_to_the_same_parameters(small_lmdb, tmp_path):
    """Checkpoints written in the background (--checkpoint-async on; auto's choice for a state of 64 MiB or
    more): kill -9 while one is half on disk (its `STEP.orbax-checkpoint-tmp` folder there) leaves the newest
    complete one, which --resume continues to the parameters of a run never interrupted, every sample seen once."""
    common = ["--data-dir", str(small_lmdb), "--epochs", "2", "--checkpoint-every-steps", "4", "--record-samples"]
    common += ["--checkpoint-async", "on"]
    check_ok(dali_launch("train", *common, "--run-root", str(tmp_path / "whole")))
    whole = only_run(tmp_path / "whole")
    waits = [json.loads(line)["checkpoint_wait_s"] for line in whole.metrics.read_text().splitlines()]
    assert len(waits) == 2 and all(w > 0 for w in waits), waits  # each epoch's mid-epoch checkpoints

    proc = start("train", *common, "--run-root", str(tmp_path / "cut"))
    # A complete checkpoint to fall back on, and the next one being written: kill at once (they take ~0.1 s).
    writing = lambda: has_checkpoint(tmp_path / "cut") and list((tmp_path / "cut").glob("*/checkpoints/*-tmp*"))
    kill_when(proc, writing, timeout_s=120)
    cut = only_run(tmp_path / "cut")
    assert proc.returncode == -signal.SIGKILL and not cut.result.exists()
    assert list(cut.checkpoints.glob("*-tmp*")), "the kill came after the write ended"
    resumed = dali_launch("train", "--resume", str(cut.root))
    check_ok(resumed)
    assert "resumed from checkpoint" in resumed.stdout
    assert _result(cut)["checksums"] == _result(whole)["checksums"]
    for epoch in range(2):
        assert seen_prints(cut, epoch) == seen_prints(whole, epoch)


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_kill_9_after_a_checkpoint_then_damage_to_it_is_found_and_the_one_before_used(small_lmdb, tmp_path, damage):
    """kill -9 just after a checkpoint committed: its file record (sizes, CRCs) was written only at the next
    save, so the newest checkpoint of a killed run went unchecked (a truncated file: `Exception: })>.`; a
    flipped byte: loaded, the run later stopped on NaN). The record is now part of the commit: the damage is
    found, the checkpoint set aside, and the run resumes from the one before, saying so in one line."""
    common = ["--data-dir", str(small_lmdb), "--epochs", "3", "--checkpoint-every-steps", "6"]
    proc = start("train", *common, "--checkpoint-async", "on", "--run-root", str(tmp_path))
    try:
        committed = lambda: whole_checkpoints(tmp_path) >= 2
        deadline = time.monotonic() + 120
        while not committed() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        reap(proc)
    paths = only_run(tmp_path)
    assert proc.returncode == -signal.SIGKILL and not paths.result.exists()
    steps = saved.complete_steps(paths)
    newest = paths.checkpoints / str(steps[-1])
    assert (newest / saved.FILES).is_file(), list(newest.iterdir())  # recorded with its commit
    victim = max((f for f in newest.rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
    size, name = victim.stat().st_size, victim.relative_to(newest)
    with victim.open("r+b") as f:
        if damage == "truncated":
            f.truncate(size // 2)
        else:
            f.seek(size // 2)
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0x40]))
    what = f"{name} is {size // 2:,} of its {size:,} bytes" if damage == "truncated" else f"{name} fails its CRC"
    resumed = dali_launch("train", "--resume", str(paths.root))
    check_ok(resumed)
    line = (
        f"checkpoint step {steps[-1]} is damaged ({what}); kept it as {paths.checkpoints}/{steps[-1]}.damaged, "
        f"resuming from step {steps[-2]}"
    )
    assert f"dali-launch: {line}" in resumed.stderr.splitlines() and line not in resumed.stdout, resumed.stderr
    assert f"resumed from checkpoint {steps[-2]}:" in resumed.stdout and "Traceback" not in resumed.stderr


def _preempt_and_resume(tmp_path, common: list[str], ready, after_s: float = 0) -> None:
    """Two epochs on 2 devices, uninterrupted and preempted (SIGUSR2 once `ready()`, then `after_s`)
    then resumed: the same parameters, the same samples in each epoch."""
    # the host table kept by a SIZE (auto keeps none today): a resume keeps its checkpoint's DALI graph
    common = [*common, "--epochs", "2", "--gpus-per-node", "2", "--record-samples", "--decoded-cache", "512M"]
    check_ok(dali_launch("train", *common, "--run-root", str(tmp_path / "whole")))
    whole = only_run(tmp_path / "whole")

    proc = start("train", *common, "--run-root", str(tmp_path / "cut"))
    err = stop_when(proc, ready, signal.SIGUSR2, after_s=after_s)
    cut = only_run(tmp_path / "cut")
    assert proc.returncode != 0 and "preempted; checkpoint written" in err, err
    assert not cut.result.exists() and any(cut.checkpoints.iterdir())
    assert json.loads(cut.rank_map.read_text())[0]["resolved"]["decoded_cache"] == "host"  # resumed with it
    resumed = dali_launch("train", "--resume", str(cut.root))
    check_ok(resumed)
    assert "resumed from checkpoint" in resumed.stdout
    assert _result(cut)["checksums"] == _result(whole)["checksums"]
    for epoch in range(2):
        assert seen_prints(cut, epoch) == seen_prints(whole, epoch)
    assert [json.loads(line)["epoch"] for line in cut.metrics.read_text().splitlines()] == [0, 1]


def test_sigstop_of_a_rank_stops_the_local_job(mnist_lmdb, tmp_path):
    """The watchdog's verdict on the stopped rank comes first, not the exit of the rank that noticed, within
    --watchdog-s and two beats. At its shortest, 10 (the default, 20, names it within 24 s: this test took 24 s
    with it, 14 s with 10)."""
    local = ["--local", "--gpus-per-node", "2", "--processes", "2", "--epochs", "50", "--watchdog-s", "10"]
    proc = start(*local, "--data-dir", str(mnist_lmdb), "--run-root", str(tmp_path))
    try:
        pid = rank_pid(tmp_path, 1)
        time.sleep(2)
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, err = proc.communicate(timeout=90)
        print(f"SIGSTOP: job over {time.monotonic() - stopped_at:.1f} s later (--watchdog-s 10)")
        assert time.monotonic() - stopped_at < 35
    finally:
        reap(proc)
    found = re.match(
        rf"dali-launch: rank 1 \(pid {pid} on \S+\) made no progress for (\d+) s \(stopped, hung or dead; --watchdog-s 10\)",
        err,
    )
    assert proc.returncode != 0 and found and int(found.group(1)) < 20, err
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _slurm_requeue_job(mnist_lmdb) -> list[str]:
    return [
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "--platform",
        "cpu",
        "--time-min",
        "15",
        "--epochs",
        "2",
        "--data-dir",
        str(mnist_lmdb),
        "--checkpoint-every-steps",
        "0",
        "--record-samples",
    ]


@pytest.fixture(scope="module")
def slurm_whole(slurm_env, mnist_lmdb, tmp_path_factory) -> RunPaths:
    """A finished 2-node SLURM run of 2 epochs, never interrupted: the requeued run's reference, and the run
    that `--resume` submits again by hand (which leaves its result as it was: it asserts so)."""
    root = tmp_path_factory.mktemp("slurm-whole")
    check_ok(dali_launch(*_slurm_requeue_job(mnist_lmdb), "--run-root", str(root), env=slurm_env))
    return only_run(root)


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_slurm_requeue_resumes_to_the_same_parameters(slurm_env, mnist_lmdb, slurm_whole, tmp_path):
    """USR2 through SLURM: every rank agrees on a step, checkpoints, the job requeues itself and the
    next incarnation finishes with the uninterrupted run's parameters."""
    common, whole = _slurm_requeue_job(mnist_lmdb), slurm_whole
    proc, job_id = start(*common, "--run-root", str(tmp_path / "cut"), env=slurm_env), None
    try:
        wait_for(lambda: rank_report(tmp_path / "cut", 1), timeout_s=120)
        time.sleep(2)
        cut = only_run(tmp_path / "cut")
        job_id = json.loads((cut.root / "job.json").read_text())["job_id"]
        env = {**os.environ, **slurm_env}
        subprocess.run(["scancel", "--signal=USR2", job_id], env=env, check=True, timeout=30)
        # SLURM holds a requeued batch job back ~2 minutes (its credential lifetime): let it start now
        wait_for(lambda: squeue(env, job_id) == "PENDING", timeout_s=180)
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, check=True, timeout=30)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None and job_id:  # frees the nodes for the next test
            subprocess.run(["scancel", job_id], env={**os.environ, **slurm_env}, timeout=30)
        reap(proc)
    assert proc.returncode == 0, err
    assert "requeued (1/3)" in out and "resumed from checkpoint" in out
    assert _result(cut)["checksums"] == _result(whole)["checksums"]
    for epoch in range(2):
        assert seen_prints(cut, epoch) == seen_prints(whole, epoch)


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_slurm_kill_9_and_sigstop_stop_the_job(slurm_env, mnist_lmdb, tmp_path):
    for sig, name in ((signal.SIGKILL, "kill"), (signal.SIGSTOP, "stop")):
        root = tmp_path / name
        job = ["--nodes", "2", "--gpus-per-node", "1", "--platform", "cpu", "--epochs", "50", "--watchdog-s", "10"]
        proc = start(*job, "--data-dir", str(mnist_lmdb), "--run-root", str(root), env=slurm_env)
        try:
            pid = rank_pid(root, 1)
            time.sleep(2)
            os.kill(pid, sig)
            hit = time.monotonic()
            _, err = proc.communicate(timeout=90)
            # a dead rank: srun ends the step (--kill-on-bad-exit); a stopped one: the watchdog
            assert time.monotonic() - hit < (30 if sig == signal.SIGKILL else 60), name
        finally:
            reap(proc, [pid] if sig == signal.SIGSTOP else [])
        assert proc.returncode != 0 and "rank 1" in err, (name, err)
        if sig == signal.SIGKILL:  # no ending of its own: srun's word names it first, not rank 0's network error
            first = next(line for line in err.splitlines() if line.startswith("dali-launch:"))
            assert "rank 1 on " in first and "was killed first (srun: Killed)" in first, err
            status = dali_launch("status", str(only_run(root).root), env=slurm_env)
            assert "rank 1 on " in status.stdout and "Killed" in status.stdout, status.stdout


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_slurm_scancel_checkpoints_before_the_job_ends(slurm_env, mnist_lmdb, tmp_path):
    """scancel sends SIGTERM: every rank agrees on a step, checkpoints it and records that it stopped."""
    job = ["--nodes", "2", "--gpus-per-node", "1", "--platform", "cpu", "--time-min", "10", "--epochs", "50"]
    proc = start(*job, "--data-dir", str(mnist_lmdb), "--run-root", str(tmp_path), env=slurm_env)
    try:
        wait_for(lambda: rank_report(tmp_path, 1), timeout_s=120)
        time.sleep(3)
        paths = only_run(tmp_path)
        job_id = json.loads((paths.root / "job.json").read_text())["job_id"]
        subprocess.run(["scancel", job_id], env={**os.environ, **slurm_env}, check=True, timeout=30)
        _, err = proc.communicate(timeout=120)
    finally:
        reap(proc)
    endings = [json.loads(paths.ending(r).read_text()) for r in range(2)]
    assert [e["how"] for e in endings] == ["stopped"] * 2 and endings[0]["step"] == endings[1]["step"], err
    assert (paths.checkpoints / str(endings[0]["step"])).is_dir()
    assert f"stopped by SIGTERM; checkpoint written at step {endings[0]['step']}" in err


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_slurms_own_time_limit_warns_and_the_job_checkpoints(slurm_env, small_lmdb, tmp_path):
    """SLURM's own time limit, not a signal we send: --time-min 1 is inside the warning's 90 s (--signal
    USR2@90), so slurmctld sends it at its next time-limit check (every 30 s); with --max-requeues 0 every
    rank checkpoints and the job ends there, resumable. (With requeues left it goes back into the queue and
    starts again, each start up to its time limit: seen by hand on this cluster, held ~2 min between
    starts, which the follower waits out: test_follow.py.)"""
    job = ["--nodes", "2", "--gpus-per-node", "1", "--platform", "cpu", "--time-min", "1", "--max-requeues", "0"]
    proc = dali_launch(*job, "--epochs", "1000", "--data-dir", str(small_lmdb), "--run-root", str(tmp_path),
                       env=slurm_env, timeout=150)  # fmt: skip
    paths = only_run(tmp_path)
    endings = [json.loads(paths.ending(r).read_text()) for r in range(2)]
    assert [e["how"] for e in endings] == ["stopped"] * 2 and endings[0]["step"] == endings[1]["step"], proc.stderr
    assert proc.returncode != 0 and proc.stderr.strip().splitlines()[-1] == (
        f"dali-launch: job {json.loads((paths.root / 'job.json').read_text())['job_id']} preempted; checkpoint "
        f"written at step {endings[0]['step']} (--max-requeues 0 reached); resume with `dali-launch --resume "
        f"{paths.root}`"
    )
    assert saved.newest(paths).step == endings[0]["step"] and not paths.result.exists()


def test_slurms_warning_during_start_up_waits_for_the_first_check_point():
    """SLURM's warning (USR2) may come before the task listens: submitit's handler, installed first, raised
    inside JAX's backend start ("Job not requeued because: timed-out too many times", seen in a run of the
    test above). From the task's first line it only raises the flag the first sync point reads."""
    from dali_launch.trainer.resilience import preemption

    def submitits(signum, frame):
        raise RuntimeError("Job not requeued because: timed-out too many times.")

    previous = signal.signal(signal.SIGUSR2, submitits)
    try:
        preemption.catch_early()
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.01)  # delivered at the next bytecode
        assert preemption.Preemption().agreed() == [preemption.REQUEUE, signal.SIGUSR2]
    finally:
        preemption.catch_early()  # this process's flag cleared for the tests after it
        signal.signal(signal.SIGUSR2, previous)


def test_checkpoints_by_time_land_mid_epoch_and_keep_the_last_k(small_lmdb, tmp_path):
    """--checkpoint-every-min: a clock decides, every process agrees; only --keep-checkpoints stay."""
    check_ok(
        dali_launch(
            "train",
            "--data-dir",
            str(small_lmdb),
            "--epochs",
            "1",
            "--sync-every-steps",
            "2",
            "--checkpoint-every-min",
            "0.0005",
            "--keep-checkpoints",
            "4",
            "--run-root",
            str(tmp_path),
        )
    )
    steps = sorted(int(p.name) for p in only_run(tmp_path).checkpoints.iterdir() if p.name.isdigit())
    assert len(steps) == 4 and steps[-1] == 16  # 800 samples / 50: the epoch-end checkpoint
    assert all(s % 2 == 0 and s < 16 for s in steps[:-1])  # mid-epoch, at sync points (every 2 steps)


@pytest.mark.slurm
def test_slurm_resume_by_hand_continues_the_run(slurm_env, slurm_whole, tmp_path):
    """`dali-launch --resume RUN_DIR` submits the run again from its directory alone (no other flag);
    it resumes from its checkpoint. A flag that would change the run (its data) is refused."""
    paths = slurm_whole
    before = _result(paths)
    refused = dali_launch("--resume", str(paths.root), "--data-dir", str(tmp_path / "elsewhere"), env=slurm_env)
    assert refused.returncode == 2 and "--data-dir" in refused.stderr and "another run" in refused.stderr
    again = dali_launch("--resume", str(paths.root), env=slurm_env)
    check_ok(again)
    assert "started by `dali-launch`" in again.stdout and "submitted job" in again.stdout
    assert "resumed from checkpoint" in again.stdout and _result(paths)["checksums"] == before["checksums"]
