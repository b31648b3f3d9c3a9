"""The Python API's runs on this machine, for real (launcher/api/): here (one process) and local (2 processes), every
method of the handle, the CLI's run of the same settings file for file, a cancel and the deaths that must leave no
process behind, a failure's own reason, and docs/python-api.md's example run as a user runs it.

The test process stands for the notebook: it submits, and the run goes on in a follower process of its own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import REPO, alive, check_ok, dali_launch, descendants, wait_for
from run_readers import final_params, only_run, rank_pid

import dali_launch as dl
from dali_launch.launcher.api import Executor, RunFailed, UsageError
from dali_launch.launcher.api import handle as api_handle
from dali_launch.launcher.backends.local import STOP_SIGNALS
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.model.models import MLP
from dali_launch.trainer.run_dir import RunPaths

pytestmark = [pytest.mark.slow]
HEAVY = ("jax", "nvidia.dali", "flax")  # what the caller must not need to import to start a run
LOCAL = {"gpus_per_node": 2, "processes": 2, "init_timeout_s": 60}
EXAMPLE = REPO / "docs" / "python_api_example.py"


def _files(paths: RunPaths) -> dict[str, str]:
    """The run's configuration files, where the run lives said as RUN and its run root as ROOT."""
    return {
        name: (paths.root / name).read_text().replace(str(paths.root), "RUN").replace(str(paths.root.parent), "ROOT")
        for name in ("config.json", "config.toml", "launch.json")
    }


def test_the_cli_and_the_api_make_the_same_run(small_lmdb, tmp_path):
    """`dali-launch train` and Executor("here") with the same settings (the model as its class): the same
    config.json, config.toml and launch.json, the same parameters bit for bit. The caller imported neither JAX nor
    DALI for it and kept its signal handlers; the handle reads the run as the CLI's commands do."""
    settings = ["--data-dir", str(small_lmdb), "--epochs", "1", "--name", "same", "--model", "mlp"]
    check_ok(dali_launch("train", *settings, "--run-root", str(tmp_path / "cli")))
    handlers, heavy = {s: signal.getsignal(s) for s in STOP_SIGNALS}, {m for m in HEAVY if m in sys.modules}
    job = Executor("here", run_root=tmp_path / "api").submit(model=MLP, data_dir=small_lmdb, epochs=1, name="same")
    result = job.result(timeout_s=600)
    assert {m for m in HEAVY if m in sys.modules} == heavy and {
        s: signal.getsignal(s) for s in STOP_SIGNALS
    } == handlers
    cli, api = only_run(tmp_path / "cli"), RunPaths(job.run_dir)
    assert api.root.parent == tmp_path / "api" and _files(api) == _files(cli)
    ours, theirs = final_params(api), final_params(cli)
    assert ours.keys() == theirs.keys() and all((ours[k] == theirs[k]).all() for k in ours)
    assert result["checksums"] == json.loads(cli.result.read_text())["checksums"]
    assert (job.state(), job.done(), job.job_id) == ("finished", True, None)
    assert job.metrics() == [json.loads(line) for line in api.metrics.read_text().splitlines()]
    assert "epoch 0: loss" in job.logs(0) and job.logs() == api.log(0).read_text()
    with pytest.raises(UsageError, match=r"^rank=1 is out of range; run same-\S+ has ranks 0\.\.0$"):
        job.logs(rank=1)


def test_a_run_here_cancelled_ends_cancelled_and_leaves_no_process(small_lmdb, tmp_path, monkeypatch):
    """The task runs in the follower itself: a cancel stops it after a checkpoint, and the run is `cancelled`.
    Waits are bounded, and result()'s says when it was its default."""
    job = Executor("here", run_root=tmp_path).submit(data_dir=small_lmdb, epochs=500)
    follower = rank_pid(tmp_path, 0)
    wait_for(job.metrics, timeout_s=300)  # an epoch trained
    assert (job.state(), job.done()) == ("running", False)
    with pytest.raises(
        TimeoutError, match=r"^run \S+ is still running after 0\.5 s \(give timeout_s= to wait longer\)"
    ):
        job.wait(timeout_s=0.5)
    monkeypatch.setattr(api_handle, "WAIT_S", 0.5)
    with pytest.raises(TimeoutError, match=r"after 0\.5 s \(result\(\)'s default; give result\(timeout_s=\.\.\.\) to"):
        job.result()
    assert job.cancel() == "cancelled" and not alive(follower)
    with pytest.raises(RunFailed, match=r"^run \S+ cancelled; resume from step \d+ with `dali-launch --resume "):
        job.result(timeout_s=5)


def test_three_runs_in_one_call_each_a_run_of_its_own_one_after_another(small_lmdb, tmp_path):
    """map_array: three learning rates in one call, each a run directory of its own with its own settings (and
    name), here one after another, the later ones pending until their turn; each handle reads its own run."""
    executor = dl.Executor("here", run_root=tmp_path, data_dir=small_lmdb, epochs=1)
    jobs = executor.map_array(learning_rate=[0.05, 0.1, 0.2], name=["a", "b", "c"])
    assert [job.state for job in jobs[1:]] == ["pending", "pending"]
    results = [job.result(timeout_s=600) for job in jobs]
    runs = [RunPaths(job.run_dir) for job in jobs]
    assert [(run.root.parent, run.root.name[0]) for run in runs] == [(tmp_path, "a"), (tmp_path, "b"), (tmp_path, "c")]
    assert [TaskSpec.load(run.root).optimizer.learning_rate for run in runs] == [0.05, 0.1, 0.2]
    assert [job.state for job in jobs] == ["finished"] * 3 and len({r["checksums"][0] for r in results}) == 3
    assert all(runs[i + 1].manifest.stat().st_mtime >= runs[i].result.stat().st_mtime for i in range(2))
    assert "epoch 0: loss" in jobs[2].stdout() and jobs[2].stderr() == jobs[2].stdout() == runs[2].log(0).read_text()


def test_a_run_cancelled_before_its_turn_never_starts(small_lmdb, tmp_path):
    jobs = dl.Executor("here", run_root=tmp_path).submit_array([{"data_dir": small_lmdb, "epochs": 1}] * 2)
    assert jobs[1].cancel() == "cancelled" and jobs[0].state == "running"
    assert jobs[0].result(timeout_s=600)["final"]["epoch"] == 0
    wait_for(lambda: jobs[1]._job.turns.over, timeout_s=60)  # the turns have passed it
    assert jobs[1]._job.follower is None and not RunPaths(jobs[1].run_dir).manifest.exists()
    assert jobs[1].state == "cancelled"


@pytest.mark.multiprocess
def test_a_local_run_of_two_processes(small_lmdb, tmp_path):
    job = Executor("local", **LOCAL).submit(data_dir=small_lmdb, epochs=1, run_root=tmp_path)
    result = job.result(timeout_s=600)
    assert len(result["checksums"]) == 2 and len(set(result["checksums"])) == 1
    assert (job.state(), job.done(), [row["epoch"] for row in job.metrics()]) == ("finished", True, [0])
    assert "epoch 0: loss" in job.logs(0) and "rank 1 on " in job.logs(rank=1)
    paths = RunPaths(job.run_dir)
    assert len(json.loads(paths.rank_map.read_text())) == 2
    assert "all ranks finished" in paths.follower_log.read_text()


def _running_local(small_lmdb, tmp_path) -> tuple:
    """A long local run, once both ranks have reported: its handle, its follower's pid, every process of the job."""
    job = Executor("local", **LOCAL).submit(data_dir=small_lmdb, epochs=500, run_root=tmp_path)
    ranks = [rank_pid(tmp_path, rank) for rank in (0, 1)]
    with open(f"/proc/{ranks[0]}/stat") as f:
        follower = int(f.read().rsplit(")", 1)[1].split()[1])  # the ranks' parent
    return job, follower, {follower, *descendants(follower)}


@pytest.mark.multiprocess
def test_a_local_run_cancelled_leaves_no_process(small_lmdb, tmp_path):
    job, _, processes = _running_local(small_lmdb, tmp_path)
    assert job.cancel() == "cancelled"
    wait_for(lambda: not any(alive(p) for p in processes), timeout_s=30)
    with pytest.raises(RunFailed, match=r"^run \S+ cancelled"):
        job.result(timeout_s=5)


@pytest.mark.multiprocess
def test_a_local_run_whose_follower_dies_leaves_no_rank(small_lmdb, tmp_path):
    """kill -9 of the follower: its ranks die with it (PR_SET_PDEATHSIG), and the run says so."""
    job, follower, processes = _running_local(small_lmdb, tmp_path)
    os.kill(follower, signal.SIGKILL)
    wait_for(lambda: not any(alive(p) for p in processes), timeout_s=30)
    assert job.wait(timeout_s=30) == "failed"
    with pytest.raises(RunFailed, match=rf"^run \S+ failed: its follower \(pid {follower}\) was killed by SIGKILL"):
        job.result(timeout_s=5)


@pytest.mark.multiprocess
def test_a_local_run_that_fails_says_its_own_reason(small_lmdb, tmp_path):
    """kill -9 of rank 1: the follower stops the job, and result() raises with the rank the launcher names."""
    job, _, processes = _running_local(small_lmdb, tmp_path)
    os.kill(rank_pid(tmp_path, 1), signal.SIGKILL)
    assert job.wait(timeout_s=120) == "failed"
    wait_for(lambda: not any(alive(p) for p in processes), timeout_s=30)
    with pytest.raises(RunFailed, match=r"^run \S+ failed: rank 1 was killed by SIGKILL"):
        job.result(timeout_s=5)


CALLER = """
import sys, time
from dali_launch.launcher.api import Executor
Executor("local", gpus_per_node=2, processes=2, init_timeout_s=60).submit(
    data_dir=sys.argv[1], epochs=500, run_root=sys.argv[2]
)
time.sleep(600)  # until the test kills it
"""


@pytest.mark.multiprocess
def test_a_local_run_does_not_outlive_the_process_that_submitted_it(small_lmdb, tmp_path):
    """kill -9 of the caller (a notebook's kernel): the kernel sends its follower SIGTERM, which stops the ranks as
    Ctrl-C does -- each checkpoints and stops -- and the run can be resumed."""
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(small_lmdb), str(tmp_path)], start_new_session=True)
    try:
        ranks = [rank_pid(tmp_path, rank) for rank in (0, 1)]
        with open(f"/proc/{ranks[0]}/stat") as f:
            follower = int(f.read().rsplit(")", 1)[1].split()[1])
        processes = {follower, *descendants(follower)}
        wait_for(lambda: only_run(tmp_path).metrics.exists(), timeout_s=300)  # an epoch trained
    finally:
        caller.kill()
        caller.wait(timeout=30)
    wait_for(lambda: not any(alive(p) for p in processes), timeout_s=120)
    status = dali_launch("status", str(only_run(tmp_path).root))
    assert re.search(r": interrupted \(.*\); epoch \d+ test accuracy .*; resume from step \d+", status.stdout), (
        status.stdout
    )
    said = only_run(tmp_path).follower_log.read_text()  # one stop: no rank killed mid-checkpoint
    assert "checkpoint written at step" in said and "killed the ranks" not in said, said


def test_the_documented_example_trains_its_own_model_and_the_mlp(tmp_path):
    """docs/python_api_example.py, run as a user runs it (its own model lives in __main__: sent by value); then
    `dali-launch --resume` continues the run of that model."""
    proc = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    check_ok(proc)
    accuracies = re.findall(r"^(own model|MLP): test accuracy (0\.\d+)$", proc.stdout, re.M)
    assert [name for name, _ in accuracies] == ["own model", "MLP"], proc.stdout
    assert all(float(value) > 0.8 for _, value in accuracies), accuracies
    own, mlp = (RunPaths(p) for p in sorted((tmp_path / "runs").glob("*-*")))
    assert own.sent("model").is_file() and 'model = "<run>:model"' in own.config_toml.read_text()
    assert not mlp.objects.exists() and 'model = "mlp"' in mlp.config_toml.read_text()
    # The CLI continues the run of a model sent by value: --resume reads it from the run directory, as its task does.
    check_ok(dali_launch("--resume", str(own.root), "--epochs", "2"))
    assert [json.loads(line)["epoch"] for line in own.metrics.read_text().splitlines()] == [0, 1]
