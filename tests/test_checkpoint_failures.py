"""Checkpoints that fail: a damaged newest checkpoint is found before anything loads it, kept under another
name, and the run resumes from the newest whole one to the parameters of the run as it was; a checkpoint
that cannot be written (a full disk) stops the job with one line, and the run resumes once there is room.
Real local jobs (2 processes × 1 CPU device), real files; the SLURM side is in test_slurm_failures.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import check_ok, dali_launch, reap, start
from run_readers import final_params, has_checkpoint, only_run

from dali_launch.launcher.backends.local import REAP_SLACK_S, died_at
from dali_launch.trainer.resilience import saved

pytestmark = [pytest.mark.slow]
multiprocess = pytest.mark.multiprocess
LOCAL = ["--local", "--gpus-per-node", "2", "--processes", "2", "--init-timeout-s", "60"]


def biggest_file(step_dir):
    return max((f for f in step_dir.rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)


def truncate_newest(paths) -> tuple[int, str]:
    """The newest checkpoint's biggest file cut to half: (its step, the file relative to the step)."""
    step = saved.complete_steps(paths)[-1]
    victim = biggest_file(paths.checkpoints / str(step))
    size = victim.stat().st_size
    with victim.open("r+b") as f:
        f.truncate(size // 2)
    return step, f"{victim.relative_to(paths.checkpoints / str(step))} is {size // 2:,} of its {size:,} bytes"


def resume_after_damage(paths, env=None) -> tuple[subprocess.CompletedProcess, int, str]:
    step, what = truncate_newest(paths)
    resumed = dali_launch("--resume", str(paths.root), env=env)
    return resumed, step, what


def fill_run_root_then_resume(job: list[str], data, tmpfs, env=None) -> subprocess.CompletedProcess:
    """`job` (local or SLURM flags) on `data` with its run root on `tmpfs`, which fills at the third
    checkpoint: one line naming the run root and the fix (the rest, Orbax's thread's traceback, is in the
    log), the previous checkpoint whole; after a remount with room, --resume finishes the run."""
    run = [*job, "--data-dir", str(data), "--epochs", "4", "--keep-checkpoints", "3"]
    failed = dali_launch(*run, "--run-root", str(tmpfs), env=env)
    paths = only_run(tmpfs)
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    (line,) = failed.stderr.strip().splitlines()
    assert failed.returncode == 1 and line.startswith("dali-launch: rank 0 failed: cannot write checkpoint "), failed
    assert f"into {paths.checkpoints}: No space left on device" in line and f"--resume {paths.root}" in line, line
    newest, damaged = saved.newest_whole(paths, rename=False)
    assert newest is not None and not damaged and newest.epoch >= 1
    assert not any(".orbax-checkpoint-tmp" in p.name for p in paths.checkpoints.iterdir())  # the half-written one went
    subprocess.run(["mount", "-o", "remount,size=200m", str(tmpfs)], check=True, timeout=30)
    check_ok(dali_launch("--resume", str(paths.root), env=env))
    assert [json.loads(line)["epoch"] for line in paths.metrics.read_text().splitlines()] == [0, 1, 2, 3]
    return failed


def only_ours_on_the_console(proc: subprocess.CompletedProcess, log) -> None:
    """Orbax's and TensorStore's tracebacks and absl's errors, from their threads, are in the rank's log
    alone (they were 350 lines on a `train` console, 378 under --local), and so is a peer's abort once
    process 0 left (JAX's coordination service with it: its C++ stack)."""
    for said in ("Traceback", "ERROR:absl", "RESOURCE_EXHAUSTED", "Event loop is closed", *REACTIONS):
        assert said not in proc.stdout and said not in proc.stderr, (said, proc.stdout[-3000:], proc.stderr[-3000:])
    assert "Traceback" in log.read_text() and "RESOURCE_EXHAUSTED" in log.read_text()


@multiprocess
def test_a_full_run_root_stops_with_one_line_and_resumes_once_there_is_room_then_a_damaged_newest_checkpoint_is_kept_aside(
    small_lmdb, small_tmpfs
):
    """2 local processes; the SLURM side is test_slurm_failures'. The run finished, the biggest file of its last
    checkpoint is cut in half: --resume says so in one line, renames it STEP.damaged, resumes from the one
    before and ends bit-identical."""
    failed = fill_run_root_then_resume(LOCAL, small_lmdb, small_tmpfs)
    paths = only_run(small_tmpfs)
    only_ours_on_the_console(failed, paths.log(0))

    uninterrupted = final_params(paths)
    steps = saved.complete_steps(paths)
    resumed, step, what = resume_after_damage(paths)
    check_ok(resumed)
    line = (
        f"checkpoint step {step} is damaged ({what}); kept it as {paths.checkpoints}/{step}.damaged, "
        f"resuming from step {steps[-2]}"
    )
    assert f"dali-launch: {line}" in resumed.stderr.splitlines() and line not in resumed.stdout, resumed.stderr
    assert (paths.checkpoints / f"{step}.damaged").is_dir() and saved.complete_steps(paths)[-1] == step
    again = final_params(paths)  # the step written again by the resumed run
    assert all(np.array_equal(uninterrupted[k], again[k]) for k in uninterrupted)
    assert "Traceback" not in resumed.stderr


def test_a_full_run_root_under_train_says_one_line_and_keeps_the_librarys_text_in_the_log(small_lmdb, small_tmpfs):
    """`train` on a run root that fills at the third checkpoint: the one line on stderr (exit 2, as any
    refusal of `train`), nothing else of Orbax's on the terminal; its tracebacks in logs/rank-0.log."""
    failed = dali_launch("train", "--data-dir", str(small_lmdb), "--epochs", "4", "--run-root", str(small_tmpfs))
    paths = only_run(small_tmpfs)
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    (line,) = failed.stderr.strip().splitlines()
    assert failed.returncode == 2 and line.startswith("dali-launch: error: cannot write checkpoint "), failed.stderr
    assert f"into {paths.checkpoints}: No space left on device (" in line and "free space on that file" in line, line
    only_ours_on_the_console(failed, paths.log(0))


def test_resume_on_a_read_only_file_system_is_one_line_saying_so(small_lmdb, small_tmpfs):
    """A run whose file system was remounted read-only: --resume ended in a 63-line traceback (EROFS, at
    its first write). Now one line before anything is written or started: read-only, and the fix (not
    "free space"); remounted read-write, it resumes."""
    check_ok(dali_launch("train", "--data-dir", str(small_lmdb), "--epochs", "1", "--run-root", str(small_tmpfs)))
    paths = only_run(small_tmpfs)
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True, timeout=30)
    refused = dali_launch("--resume", str(paths.root), "--epochs", "2")
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"dali-launch: error: --resume {paths.root}: {paths.root} is on a read-only file system, and a run goes on "
        "by writing there (checkpoints, logs); remount it read-write, then resume again"
    ], refused.stderr
    subprocess.run(["mount", "-o", "remount,rw", str(small_tmpfs)], check=True, timeout=30)
    check_ok(dali_launch("--resume", str(paths.root), "--epochs", "2"))


REACTIONS = ("Terminating process because the JAX distributed", "Check failure stack trace")
REFUSED = {
    "immutable": (
        "Operation not permitted",
        "make it writable (`lsattr -d` shows an immutable flag; `chattr -i` clears it)",
        (["chattr", "+i", "{d}"],),
        (["chattr", "-i", "{d}"],),
    ),
    "read-only": (
        "Read-only file system",
        "remount it read-write (or resume where it can be written)",
        (["mount", "--bind", "{d}", "{d}"], ["mount", "-o", "remount,bind,ro", "{d}"]),
        (["umount", "{d}"],),
    ),
}


@multiprocess
@pytest.mark.parametrize("how", REFUSED)
def test_a_refused_checkpoint_write_names_the_rank_it_failed_on_and_its_cause(small_lmdb, tmp_path, how):
    """2 processes; once the first checkpoint is complete its folder refuses writes (`chattr +i`: EPERM; a
    read-only bind mount: EROFS). The job's line named rank 1, which only reacted (its abort once process 0
    left was counted REAP_SLACK_S early), and said a bare PermissionError or "free space" for a read-only
    file system. Now: rank 0, the refused write and the fix for that cause."""
    cause, fix, apply, undo = REFUSED[how]
    run = [*LOCAL, "--data-dir", str(small_lmdb), "--epochs", "20", "--checkpoint-every-steps", "2"]
    proc = start(*run, "--run-root", str(tmp_path / "runs"))
    folder = None
    try:
        deadline = time.monotonic() + 120
        while not has_checkpoint(tmp_path / "runs"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        folder = only_run(tmp_path / "runs").checkpoints
        for command in apply:
            if subprocess.run([a.format(d=folder) for a in command], capture_output=True, timeout=30).returncode:
                pytest.skip(f"`{' '.join(command[:2])}` is not permitted here")
        out, err = proc.communicate(timeout=300)
    finally:
        reap(proc)
        for command in undo if folder else ():
            subprocess.run([a.format(d=folder) for a in command], capture_output=True, timeout=30)
    assert not any(said in out for said in REACTIONS), out[-3000:]
    first = err.strip().splitlines()[0]
    assert proc.returncode == 1 and first.startswith("dali-launch: rank 0 failed: cannot write checkpoint "), err
    assert f" into {folder}: {cause}; {fix}, then `dali-launch --resume {folder.parent}`: the newest " in first, first
    assert "free space" not in first


def test_a_death_after_a_peers_own_diagnosis_is_not_counted_before_it():
    """The launcher's clock for a rank that died without a word: REAP_SLACK_S early (before the peers it
    took down), but not before a peer's explained failure it came after."""
    said = [{"rank": 0, "how": "failed", "at": 100.0, "explained": True}]
    reacted = [{"rank": 0, "how": "failed", "at": 100.0, "explained": False}]  # a collective that failed
    assert died_at(100.3, said) == 100.3
    assert died_at(100.3, reacted) == died_at(100.3, []) == 100.3 - REAP_SLACK_S
    assert died_at(99.5, said) == 99.5 - REAP_SLACK_S  # it died first


@multiprocess
def test_local_timeout_checkpoints_before_it_stops_and_says_how_to_resume(mnist_lmdb, tmp_path):
    """--local-timeout-s passes mid-run: every rank checkpoints at its next sync point and stops, as after
    Ctrl-C; the launcher says where, and how to resume (exit 1); the run is `interrupted`, resumable. (7 s: 8.3 s
    for the test, 13 s at 12; one that passes during start-up still ends in a checkpoint at the first sync point.)"""
    run = [*LOCAL, "--data-dir", str(mnist_lmdb), "--epochs", "50", "--local-timeout-s", "7"]
    proc = dali_launch(*run, "--run-root", str(tmp_path), timeout=300)
    paths = only_run(tmp_path)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "dali-launch: --local-timeout-s 7 passed: asking every rank" in proc.stderr
    assert last.startswith(
        "dali-launch: the job did not finish within --local-timeout-s 7; checkpoint written at step "
    )
    assert last.endswith(
        f"resume with `dali-launch --resume {paths.root}` (give it a larger --local-timeout-s to finish)"
    )
    assert saved.newest(paths) is not None
    status = dali_launch("status", str(paths.root))
    assert "interrupted (stopped by SIGTERM)" in status.stdout and "dali-launch --resume" in status.stdout


def test_a_thread_unwinding_from_a_failed_write_does_not_wait_at_orbaxs_barrier():
    """FailFast, Orbax's barrier: entered normally, but raised through by a thread leaving a failed write
    (Orbax syncs in a `finally`), the failure kept for the loop's next sync point."""
    from dali_launch.trainer.resilience.checkpoint import FailFast

    fail_fast, met = FailFast({0, 1}), []
    fail_fast.barrier = lambda key, timeout_ms: met.append(key)
    fail_fast(key="a", timeout_ms=1)
    refused = OSError(28, "No space left on device")
    with pytest.raises(OSError) as raised:
        try:
            raise refused
        finally:
            fail_fast(key="b", timeout_ms=1)
    assert met == ["a"] and raised.value is refused and fail_fast.failed is refused


def test_leave_ends_the_process_past_a_thread_that_raises_its_failure_again_from_join():
    """Orbax's threads raise their failure again from join() (a refused write): `ending.leave` still exits with
    the code it was given and prints nothing (in CI a full disk's one line was followed by 40 lines of it)."""
    code = """
import threading
import time
from dali_launch.trainer.resilience.ending import leave
class Failed(threading.Thread):
    def join(self, timeout=None):
        super().join(timeout)
        raise ValueError("Checkpoint directory does not exist")
Failed(target=time.sleep, args=(0.3,)).start()  # alive when leave() joins it
leave(3)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "", ""), proc.stderr
