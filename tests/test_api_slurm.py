"""The Python API's SLURM runs on the local cluster (slurm/cluster.sh): Executor("slurm") submits as --detach does
and returns at once; the handle follows the job through squeue and sacct, reads its files, and cancels it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import wait_for

from dali_launch.launcher.api import Executor, RunFailed
from dali_launch.trainer.config import TaskSpec

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.multiprocess]
CPU_JOB = {"nodes": 2, "gpus_per_node": 1, "platform": "cpu", "time_min": 15}


@pytest.fixture
def on_cluster(slurm_env, monkeypatch):
    """This process, the notebook, talks to the test cluster: SLURM's clients read its environment."""
    for name, value in slurm_env.items():
        monkeypatch.setenv(name, value)


def processes_of(run_dir: Path) -> list[int]:
    """This host's processes whose command line names the run directory (a task: submitit's folder is in it)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(run_dir).encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:  # gone meanwhile
            continue
    return found


def test_a_slurm_run_and_its_handle(on_cluster, small_lmdb, tmp_path):
    job = Executor("slurm", **CPU_JOB).submit(data_dir=small_lmdb, epochs=1, run_root=tmp_path)
    assert job.job_id and job.state() in ("pending", "running")
    result = job.result(timeout_s=600)
    assert len(result["checksums"]) == 2 and len(set(result["checksums"])) == 1
    assert (job.state(), job.done(), [row["epoch"] for row in job.metrics()]) == ("finished", True, [0])
    assert "epoch 0: loss" in job.logs(0) and "Starting with JobEnvironment" in job.logs(rank=1)


def test_a_slurm_run_cancelled_ends_cancelled_and_leaves_no_process(on_cluster, small_lmdb, tmp_path):
    job = Executor("slurm", **CPU_JOB).submit(data_dir=small_lmdb, epochs=2000, run_root=tmp_path)
    wait_for(job.metrics, timeout_s=300)  # an epoch trained: its tasks run
    assert job.state() == "running" and processes_of(job.run_dir)
    assert job.cancel() == "cancelled"
    wait_for(lambda: not processes_of(job.run_dir), timeout_s=60)
    with pytest.raises(RunFailed, match=rf"^job {job.job_id} cancelled"):
        job.result(timeout_s=5)


def test_three_runs_in_one_call_are_one_job_array(on_cluster, small_lmdb, tmp_path):
    """map_array on SLURM: one job array, as --sweep submits one; each element a run directory of its own."""
    executor = Executor("slurm", **{**CPU_JOB, "nodes": 1}, data_dir=small_lmdb, epochs=1, run_root=tmp_path)
    jobs = executor.map_array(learning_rate=[0.05, 0.1, 0.2])
    assert len({job.job_id.split("_")[0] for job in jobs}) == 1 and len({job.run_dir for job in jobs}) == 3
    assert [job.result(timeout_s=600)["final"]["epoch"] for job in jobs] == [0, 0, 0]
    assert [job.state for job in jobs] == ["finished"] * 3
    assert [TaskSpec.load(job.run_dir).optimizer.learning_rate for job in jobs] == [0.05, 0.1, 0.2]
    assert "epoch 0: loss" in jobs[1].stdout() and "Job completed successfully" in jobs[1].stderr()
