"""A run's job from the launcher's side (backends/job.py, registry.py, commands/jobs.py) and the one sbatch
table (backends/slurm_options.py): pure, on run directories' files as the tasks and backends leave them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dali_launch.launcher.backends import registry, slurm_template
from dali_launch.launcher.backends.job import LocalJob, RunState, ended_state, request_cancel, write_record
from dali_launch.launcher.backends.slurm import batch_script, make_executor
from dali_launch.launcher.backends.slurm_job import SlurmJob
from dali_launch.launcher.backends.slurm_options import OPTIONS, SET_BY_US, sbatch_values
from dali_launch.launcher.commands import jobs
from dali_launch.launcher.options import Values
from dali_launch.launcher.route import directory
from dali_launch.launcher.run_config import LaunchConfig, RunConfig, SlurmConfig
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import ending, scheduler
from dali_launch.trainer.run_dir import RunPaths, hold_lock
from dali_launch.trainer.topology import Topology

EVERY_OPTION = RunConfig(
    launch=LaunchConfig(nodes="2", gpus_per_node=2, tasks_per_node=2, name="n"),
    slurm=SlurmConfig(
        partition="p", account="a b", qos="q", constraint="c", mem_gb=4, cpus_per_task=3, exclusive=True, time_min=7
    ),
)


def _sbatch_lines(script: str) -> set[str]:
    return {line for line in script.splitlines() if line.startswith("#SBATCH ")}


def test_the_submission_and_the_template_write_the_table_alike(tmp_path):
    """Every option of the table reaches sbatch as the same line through submitit and `slurm template`."""
    submitted = _sbatch_lines(batch_script(make_executor(EVERY_OPTION, tmp_path, preview=True)))
    own = _sbatch_lines(slurm_template.template(EVERY_OPTION, Values()))
    table = {key for key in sbatch_values(EVERY_OPTION)}
    assert table == {o.key for o in OPTIONS} - {"mincpus"}  # a --nodes range's alone
    for key in table:
        (line,) = [line for line in submitted if line.split("=")[0] == f"#SBATCH --{key}"]
        assert line in own, (line, own)
    assert "#SBATCH --mem=4G" in own  # sbatch's documented suffix, in both
    # An --sbatch-arg may not replace what the table writes (mem and exclusive take values ours cannot).
    assert set(SET_BY_US) == {o.key for o in OPTIONS if not o.open} | {
        "output",
        "error",
        "open-mode",
        "signal",
        "requeue",
    }


def _run_dir(tmp_path: Path, name: str = "a") -> RunPaths:
    run = RunConfig(launch=LaunchConfig(run_root=str(tmp_path / "runs"), name=name, gpus_per_node=1))
    return directory.create(run, tmp_path / "data", "local")


def test_a_run_directory_says_how_its_run_ended(tmp_path):
    paths = _run_dir(tmp_path)
    assert ended_state(paths) is RunState.NOT_STARTED and LocalJob(paths).state() is RunState.NOT_STARTED
    paths.manifest.write_text("{}")
    assert ended_state(paths) is RunState.FAILED  # started, then died without a word
    ending.record(paths, 0, ending.STOPPED, "stopped by SIGTERM", step=3)
    assert ended_state(paths) is RunState.INTERRUPTED
    assert ended_state(paths, cancelled=True) is RunState.CANCELLED  # a scancel of the user's
    failed = _run_dir(tmp_path, "b")  # the follower cancels a job whose rank died (srun's word recorded)
    ending.record(failed, 1, ending.FAILED, "rank 1 on node2 was killed first (srun: Killed)")
    assert ended_state(failed, cancelled=True) is RunState.FAILED
    request_cancel(paths)
    assert ended_state(paths) is RunState.CANCELLED and f"{RunState.CANCELLED}" == "cancelled"
    lock = hold_lock(paths.lock("task"))
    assert LocalJob(paths).state() is RunState.RUNNING
    lock.close()
    paths.result.write_text("{}")
    assert LocalJob(paths).state() is RunState.FINISHED
    directory.resume(RunConfig(launch=LaunchConfig(resume=str(paths.root))), tmp_path / "data", "local", False)
    assert not paths.cancel.exists()  # a resumed run is no longer the cancelled one


def test_status_says_what_requeued_the_job_until_a_resume(tmp_path):
    """A task records each requeue SLURM took (scheduler.py); `status` says the last and how many, whatever the
    run's state; `--resume` submits another job, and forgets them."""
    paths, job = _run_dir(tmp_path), Topology(0, 2, None, None, None, "node1", "cpu", job_id="12")
    line = lambda: jobs.status_line(LocalJob(paths)).replace(str(paths.root), "RUN").replace(paths.root.name, "RUN")
    assert line() == "run RUN: not started; run directory RUN"
    scheduler.record(job, paths, "SIGUSR2, checkpoint at step 40")
    assert line() == "run RUN: not started; requeued by SIGUSR2, checkpoint at step 40; run directory RUN"
    scheduler.record(dataclasses.replace(job, restart_count=1), paths, "the watchdog: rank 1 made no progress")
    assert "not started; requeued 2 times, the last by the watchdog: rank 1 made no progress; run" in line()
    directory.resume(RunConfig(launch=LaunchConfig(resume=str(paths.root))), tmp_path / "data", "local", False)
    assert line() == "run RUN: not started; run directory RUN"


def test_the_job_of_a_run_directory_is_found_by_path_name_or_job_id(tmp_path):
    local, submitted = _run_dir(tmp_path, "local"), _run_dir(tmp_path, "slurm")
    write_record(submitted, "4242", submitted.submitit)
    root = str(tmp_path / "runs")
    assert isinstance(registry.attach(local), LocalJob) and isinstance(registry.attach(submitted), SlurmJob)
    assert jobs.find(str(local.root), "elsewhere").paths.root == local.root
    assert jobs.find(local.root.name, root).paths.root == local.root  # as `dali-launch runs` lists it
    assert jobs.find("4242", root).paths.root == submitted.root
    logs = registry.attach(submitted).logs(1)
    assert [p.name for p in logs] == ["4242_1_log.out", "4242_1_log.err"] and logs[0].parent.name == "4242"
    with pytest.raises(UsageError, match="no run of job 4243 under"):
        jobs.find("4243", root)
    with pytest.raises(UsageError, match="no such run directory"):
        jobs.find(str(tmp_path / "runs" / "gone"), root)
    with pytest.raises(UsageError, match="no run named gone under"):
        jobs.find("gone", root)
    assert json.loads(submitted.job.read_text())["job_id"] == "4242"
