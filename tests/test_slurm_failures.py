"""What fails on the local two-node SLURM cluster, and what a user is told: a rank's exception first, before
its peers' follow-on errors; a run root that fills up, in one line; a run of the user's own `srun dali-launch
task` continued with `dali-launch --resume RUN` from a login node, past its damaged newest checkpoint; Ctrl-C
while following a job; a SIGUSR2 as the tasks start, and one before their step exists; a coordinator port another program holds; a job that waits in the queue."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import check_ok, dali_launch, reap, squeue, start, wait_for
from run_readers import final_params, only_run
from test_allocation import _ended, _sbatch
from test_checkpoint_failures import fill_run_root_then_resume, only_ours_on_the_console, resume_after_damage
from test_endings import FAILING

from dali_launch.launcher.backends import slurm_queue
from dali_launch.launcher.backends.job import JobRecord
from dali_launch.launcher.backends.slurm_job import SlurmJob
from dali_launch.launcher.backends.slurm_queue import RELEASE_TIMEOUT_S
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import coordinator_port

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.multiprocess]
JOB = ["--nodes", "2", "--gpus-per-node", "1", "--platform", "cpu", "--time-min", "15"]


def test_an_exception_in_rank_1_is_told_first(slurm_env, small_lmdb, tmp_path):
    """Rank 1 raises in its 16th step; rank 0 is left waiting in a collective and fails after it. The first
    line is rank 1's, with its exception, then its traceback; rank 0's follow-on error comes after."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "failing.py").write_text(textwrap.dedent(FAILING))
    proc = dali_launch(
        *JOB, "--model", "failing:mid_epoch", "--parallel", "pmap", "--epochs", "3", "--data-dir", str(small_lmdb),
        "--run-root", str(tmp_path / "runs"), env={**slurm_env, "PYTHONPATH": str(tmp_path / "code")},
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert lines[0].startswith("dali-launch: rank 1 failed: ") and "rank 1 fails mid-epoch (injected)" in lines[0]
    assert lines[1].startswith("dali-launch: rank 1 of job ") and "Traceback" in lines[2], proc.stderr
    # Rank 0's follow-on (srun's word on task 0) is there only when srun saw it before our scancel: a race.
    if "rank 0 on node1" in proc.stderr:
        assert proc.stderr.index("rank 1 fails mid-epoch") < proc.stderr.index("rank 0 on node1")  # the cause first


def test_a_full_run_root_stops_the_job_in_one_line_and_it_resumes_once_there_is_room(
    slurm_env, small_lmdb, small_tmpfs
):
    """As in local mode (both nodes of the test cluster are this machine): one line, then `--resume` submits
    again and finishes the run once there is room. The console that followed the job shows the run's own
    lines: Orbax's threads' tracebacks and submitit's word (300 lines of them) are in rank 0's log alone."""
    failed = fill_run_root_then_resume(JOB, small_lmdb, small_tmpfs, env=slurm_env)
    first_job = min(
        (d for d in only_run(small_tmpfs).submitit.iterdir() if d.name.isdigit()), key=lambda d: int(d.name)
    )
    only_ours_on_the_console(failed, first_job / f"{first_job.name}_0_log.err")
    assert "submitit" not in failed.stdout and "epoch 1: loss" in failed.stdout


def test_an_srun_task_run_resumes_from_a_login_node_past_a_damaged_checkpoint(slurm_env, small_lmdb, tmp_path):
    """A user's own script, `srun dali-launch task` with no --platform (auto: cpu on these nodes), 2 epochs;
    its newest checkpoint then cut short. `dali-launch --resume RUN` from here: submitted as a job of its
    own (the recorded auto kept, not guessed again), it passes over the damaged checkpoint, keeps it aside,
    goes on from the one before and ends with the parameters the job had; --platform cpu beside --resume
    is the run's own value, not a change."""
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=10\n"
        f"srun --kill-on-bad-exit=1 {sys.executable} -m dali_launch.launcher.cli task --epochs 2 "
        f"--checkpoint-every-steps 4 --data-dir {small_lmdb} --run-root {tmp_path / 'runs'}\n"
    )
    job_id = _sbatch(script, slurm_env)
    state = _ended(slurm_env, job_id, timeout_s=300)
    paths = RunPaths(tmp_path / "runs" / f"dali-launch-{job_id}.0")
    assert state == "COMPLETED" and paths.result.exists(), (tmp_path / f"slurm-{job_id}.out").read_text()
    uninterrupted, steps = final_params(paths), saved.complete_steps(paths)
    resumed, step, what = resume_after_damage(paths, env=slurm_env)
    check_ok(resumed)
    assert "submitted job" in resumed.stdout and "resumed from checkpoint" in resumed.stdout, resumed.stdout
    assert (
        f"dali-launch: checkpoint step {step} is damaged ({what}); kept it as {paths.checkpoints}/{step}.damaged, "
        f"resuming from step {steps[-2]}" in resumed.stderr.splitlines()
    ), resumed.stderr
    again = final_params(paths)
    assert all(np.array_equal(uninterrupted[k], again[k]) for k in uninterrupted)
    check_ok(dali_launch("--resume", str(paths.root), "--platform", "cpu", "--dry-run", env=slurm_env))


def test_ctrl_c_while_following_says_the_job_goes_on(slurm_env, small_lmdb, tmp_path):
    """SIGINT to the launcher following a job: it says the job goes on and how to follow or stop it (exit
    130), and the job does go on."""
    proc = start(*JOB, "--epochs", "100", "--data-dir", str(small_lmdb), "--run-root", str(tmp_path), env=slurm_env)
    try:
        wait_for(lambda: any(tmp_path.glob("*/ranks/rank-1.json")), timeout_s=180)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        paths = only_run(tmp_path)
        job_id = json.loads(paths.job.read_text())["job_id"]
        assert proc.returncode == 130 and err.strip().splitlines()[-1] == (
            f"dali-launch: interrupted: job {job_id} goes on running; follow it again with `dali-launch logs "
            f"{paths.root} --follow`, or stop it with `dali-launch cancel {paths.root}`"
        ), err
        assert squeue({**slurm_env}, job_id) == "RUNNING"
    finally:
        proc.kill()
        for record in tmp_path.glob("*/job.json"):
            dali_launch("cancel", json.loads(record.read_text())["job_id"], "--run-root", str(tmp_path), env=slurm_env)


def test_resume_waits_for_a_job_slurm_is_still_reaping(slurm_env, tmp_path, monkeypatch):
    """A job's tasks have stopped, but it stays COMPLETING while slurmd reaps them (KillWait: 5 s on the test
    cluster, 30 s by default). `--resume` refused it in that window (CI of stop 45, right after the launcher's
    own scancel); the job handle now says so and waits, bounded, until SLURM has let it go. A job whose
    batch script ignores SIGTERM holds that state for KillWait after scancel."""
    script = tmp_path / "deaf.sh"
    script.write_text("#!/bin/bash\ntrap '' TERM\nsleep 120 & wait; sleep 120\n")
    job_id = _sbatch(script, slurm_env)
    wait_for(lambda: squeue(slurm_env, job_id) == "RUNNING", timeout_s=60)
    subprocess.run(["scancel", job_id], env={**os.environ, **slurm_env}, check=True, timeout=30)
    wait_for(lambda: squeue(slurm_env, job_id) == "COMPLETING", timeout_s=10)
    for name, value in slurm_env.items():
        monkeypatch.setenv(name, value)
    said = []
    SlurmJob(RunPaths(tmp_path / "run"), JobRecord(job_id, tmp_path)).settle(said.append)
    assert said == [
        f"job {job_id} is ending (COMPLETING: SLURM reaps its tasks); waiting up to {RELEASE_TIMEOUT_S} s for it "
        "to leave the queue"
    ]
    assert slurm_queue.queue_state(job_id) is None


def _task_pids(folder) -> list[int]:
    """The processes on this host that are tasks of the job whose submitit folder is `folder` (both nodes of
    the test cluster are this machine), not the sruns that started them."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            continue
        task = b"submitit.core._submit" in argv and not argv[0].endswith(b"srun")
        if task and any(a.startswith(str(folder).encode()) for a in argv):
            pids.append(int(entry))
    return pids


def test_usr2_as_the_tasks_start_requeues_the_job(slurm_env, small_lmdb, tmp_path):
    """`scancel --signal=USR2` (the way to ask a job for a checkpoint and a requeue) sent the moment the tasks
    exist, before their Python has installed any handler: the signal waits for the trainer's handler, and the
    job checkpoints and requeues itself. Before, its default action killed the tasks and the job ended
    FAILED, unrequeued, its run "not started"."""
    env = {**os.environ, **slurm_env}
    args = [*JOB, "--epochs", "2", "--data-dir", str(small_lmdb), "--run-root", str(tmp_path), "--detach"]
    check_ok(dali_launch(*args, env=slurm_env))
    paths = only_run(tmp_path)
    job_id = json.loads(paths.job.read_text())["job_id"]
    wait_for(lambda: len(_task_pids(paths.submitit)) == 2, timeout_s=120)
    for _ in range(10):  # from the tasks' first instant until well past their imports
        subprocess.run(["scancel", "--signal=USR2", job_id], env=env, capture_output=True, timeout=30)
        time.sleep(0.1)
    said = lambda: (paths.submitit / job_id / f"{job_id}_0_log.out").read_text()
    requeued = lambda: f"job {job_id} requeued (1/3)" in said() and squeue(slurm_env, job_id) in slurm_queue.WAITING
    ended = lambda: (state := squeue(slurm_env, job_id)) in ("", "FAILED", "COMPLETED") and (state or "gone")
    try:
        how = wait_for(lambda: "requeued" if requeued() else ended(), timeout_s=120)
    finally:
        subprocess.run(["scancel", job_id], env=env, timeout=30)
    err = (paths.submitit / job_id / f"{job_id}_0_log.err").read_text()
    assert how == "requeued", f"job {job_id} not requeued: {how}\n{err[-2000:]}"


def test_usr2_to_the_batch_shell_before_the_step_exists_requeues_the_job(slurm_env, small_lmdb, tmp_path):
    """`scancel --full --signal=USR2` while the job's batch shell runs its setup, before srun's step exists: the
    shell notes it, the tasks read the note as they start, checkpoint at their first agreed step and requeue the
    job, which finishes; `status` says what requeued it. Before, the shell's default action ended it: the job
    FAILED, "not started". (A plain `scancel --signal=USR2` then reaches no process: SLURM signals steps alone.)"""
    env, ready, go = {**os.environ, **slurm_env}, tmp_path / "in-setup", tmp_path / "go"
    # The batch shell, held before its srun step until the test has sent the signal (at most 60 s).
    held = f"for i in $(seq 600); do [ -e {shlex.quote(str(go))} ] && break; sleep 0.1; done"
    setup = f"touch {shlex.quote(str(ready))}; {held}"
    args = [*JOB, "--epochs", "2", "--data-dir", str(small_lmdb), "--run-root", str(tmp_path / "runs")]
    check_ok(dali_launch(*args, "--setup", setup, "--detach", env=slurm_env))
    paths = only_run(tmp_path / "runs")
    job_id = json.loads(paths.job.read_text())["job_id"]
    try:
        wait_for(ready.exists, timeout_s=120)
        steps = subprocess.run(
            ["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], env=env, capture_output=True, text=True
        )
        subprocess.run(["scancel", "--full", "--signal=USR2", job_id], env=env, check=True, timeout=30)
        go.touch()
        said = lambda: (paths.submitit / job_id / f"{job_id}_0_log.out").read_text()
        wait_for(lambda: f"job {job_id} requeued (1/3)" in said() and squeue(slurm_env, job_id) == "PENDING", 120)
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, check=True, timeout=30)
        wait_for(lambda: squeue(slurm_env, job_id) in ("COMPLETED", "FAILED", ""), timeout_s=180)
    finally:
        subprocess.run(["scancel", job_id], env=env, timeout=30)
    status = dali_launch("status", str(paths.root), env=slurm_env).stdout
    assert steps.stdout.split() == [f"{job_id}.batch"], steps.stdout  # no step yet when the signal came
    assert f"job {job_id}: finished; requeued by SIGUSR2 (sent before the tasks started" in status, status
    step = re.search(r"checkpoint at step (\d+);", status)
    assert step and f"resumed from checkpoint {step[1]}:" in said(), (status, said())


def test_a_taken_coordinator_port_is_passed_over(slurm_env, small_lmdb, tmp_path):
    """Another program listens on the port the next job's id derives for its coordinator (both nodes of the
    test cluster are this machine). Process 0 listens on the next free port, says so, and tells the other
    rank through the run directory; the job trains. Before, process 0 failed with JAX's "Failed to start RPC
    server" and a page of traceback that named no port."""
    env = {**os.environ, **slurm_env}
    last = subprocess.run(
        ["sbatch", "--parsable", "--time=1", "--output=/dev/null", "--wrap=true"],
        env=env, capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    port = coordinator_port(str(int(last) + 1))  # the cluster numbers jobs in turn; this test submits the next
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", port))
        holder.listen(1)
        proc = dali_launch(
            *JOB, "--epochs", "1", "--data-dir", str(small_lmdb), "--run-root", str(tmp_path), env=slurm_env
        )
    job_id = json.loads(only_run(tmp_path).job.read_text())["job_id"]
    assert job_id == str(int(last) + 1), f"another job was submitted between {last} and ours, {job_id}"
    check_ok(proc)
    assert f"[rank 0] dali-launch: port {port} on node1 is taken; the coordinator listens on {port + 1}" in proc.stdout
    assert "done: test accuracy" in proc.stdout


def test_a_queued_job_says_why_it_waits_and_ctrl_c_calls_it_queued(slurm_env, small_lmdb, tmp_path):
    """node2 drained: the 2-node job cannot start. The follower says why it waits, in squeue's words, once
    (not at every poll); Ctrl-C then calls the job queued, not running (before, nothing was said while it
    waited, and Ctrl-C said it "goes on running")."""
    env = {**os.environ, **slurm_env}
    node2 = lambda *state: subprocess.run(["scontrol", "update", "nodename=node2", *state], env=env, check=True, timeout=30)  # fmt: skip
    out, runs = tmp_path / "stdout.txt", tmp_path / "runs"
    node2("state=drain", "reason=drained by a test")
    try:
        with out.open("w") as sink:
            args = [*JOB, "--epochs", "1", "--data-dir", str(small_lmdb), "--run-root", str(runs)]
            proc = start(*args, env=slurm_env, stdout=sink)
            try:
                wait_for(lambda: "in the queue" in out.read_text(), timeout_s=60)
                time.sleep(3)  # three more polls
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=60)
            finally:
                reap(proc)
    finally:
        node2("state=resume")
        for record in runs.glob("*/job.json"):
            subprocess.run(["scancel", json.loads(record.read_text())["job_id"]], env=env, timeout=30)
    paths = only_run(runs)
    job_id = json.loads(paths.job.read_text())["job_id"]
    waiting = (
        f"job {job_id} is pending in the queue: Nodes required for job are DOWN, DRAINED or reserved for jobs in "
        "higher priority partitions"
    )
    assert out.read_text().count(waiting) == 1, out.read_text()
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == (
        f"dali-launch: interrupted: job {job_id} is still queued (pending: Nodes required for job are DOWN, DRAINED "
        f"or reserved for jobs in higher priority partitions); it stays queued; follow it again with `dali-launch "
        f"logs {paths.root} --follow`, or stop it with `dali-launch cancel {paths.root}`"
    ), err
