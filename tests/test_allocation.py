"""In-allocation mode: `srun dali-launch task` in the user's own sbatch script or salloc (backends/allocation.py),
and `dali-launch slurm template`, the script to start from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from catalogue import run_entry
from conftest import REPO, check_ok, dali_launch, squeue, wait_for

from dali_launch.launcher.backends import slurm_template
from dali_launch.launcher.backends.srun_step import expand_counts, step_of
from dali_launch.launcher.cli import main
from dali_launch.trainer.run_dir import RunPaths

GOLDEN = Path(__file__).parent / "golden"
CPU = ["--platform", "cpu", "--epochs", "1"]
STEP = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_NTASKS": "2",
}


# --- pure: the step, the template --------------------------------------------------------------------


def in_salloc(shell: str, tasks_per_node: int, timeout_s: int, slurm_env: dict) -> str:
    """`shell` run by bash inside a 2-node salloc of the local cluster (it ends with `echo $SLURM_JOB_ID`);
    the job's id."""
    proc = subprocess.run(
        ["salloc", "--nodes", "2", "--ntasks-per-node", str(tasks_per_node), "bash", "-c", shell],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **slurm_env},
    )
    return proc.stdout.split()[-1]


def test_step_from_srun_variables():
    assert expand_counts("2(x3),1") == (2, 2, 2, 1) and expand_counts("4") == (4,)
    step = step_of(STEP)
    assert (step.job_id, step.step_id, step.process_id, step.num_tasks, step.tasks_per_node) == (
        "77",
        "0",
        1,
        2,
        (1, 1),
    )
    assert step_of({"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2"}) is None  # a batch script or salloc shell: no step


def test_template_is_the_golden_script(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(slurm_template, "_dali_launch", lambda: "dali-launch")
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "slurm",
                "template",
                "--nodes",
                "2",
                "--gpus-per-node",
                "8",
                "--partition",
                "gpu",
                "--account",
                "proj 1",
                "--epochs",
                "3",
                "--data-dir",
                "/data/mnist",
                "--setup",
                "module load cuda",
                "--no-record-samples",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    golden = GOLDEN / "slurm_template.sh"
    assert golden.is_file(), f"write {golden} from:\n{text}"
    assert text == golden.read_text()


# --- bad inputs: one line, exit 2, nothing written -------------------------------------------------


def _entries():
    outside = (
        "`dali-launch task` is one task of a SLURM job step, and this is outside any SLURM allocation (no "
        "SLURM_JOB_ID); start it as `srun dali-launch task ...` in an sbatch script or salloc (`dali-launch "
        "slurm template` writes one)"
    )
    smaller = (
        "--nodes 3 asks for more than the 2 nodes of this job step (SLURM_STEP_NUM_NODES); run srun in an "
        "allocation of that shape (sbatch/salloc --nodes 3), or leave --nodes out to take the step's"
    )
    per_node = (
        "--tasks-per-node 2 asks for more than the 1 tasks per node of this job step "
        "(SLURM_STEP_TASKS_PER_NODE); run srun in an allocation of that shape (sbatch/salloc --tasks-per-node "
        "2), or leave --tasks-per-node out to take the step's"
    )
    one_of_n = (
        "`dali-launch train` runs one process, but this is task 1 of 2 of SLURM job step 77.0: each would "
        "train alone; to train with all 2 tasks use `srun dali-launch task` with the same flags"
    )
    return [
        pytest.param({}, ["task"], outside, id="task-outside-any-allocation"),
        pytest.param(STEP, ["task", "--nodes", "3"], smaller, id="task-allocation-smaller-than-asked"),
        pytest.param(
            STEP,
            ["task", "--gpus-per-node", "2", "--tasks-per-node", "2"],
            per_node,
            id="task-more-tasks-per-node-than-the-step",
        ),
        pytest.param(STEP, ["train"], one_of_n, id="train-as-one-of-several-tasks"),
    ]


@pytest.mark.parametrize("env, args, message", _entries())
def test_bad_inputs(capsys, place, nothing_starts, monkeypatch, env, args, message):
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    folder, fill = place
    run_entry(
        capsys,
        folder,
        *fill([*args, "--platform", "cpu", "--data-dir", "{data}", "--run-root", "{root}"], message, None),
    )


# --- for real, on the local cluster ------------------------------------------------------------------


def _script(tmp_path: Path, data: Path, *flags: str, env: dict) -> Path:
    proc = dali_launch(
        "slurm",
        "template",
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "--time-min",
        "10",
        "--data-dir",
        str(data),
        "--run-root",
        str(tmp_path / "runs"),
        *CPU,
        *flags,
        env=env,
    )
    check_ok(proc)
    script = tmp_path / "job.sh"
    script.write_text(proc.stdout)
    return script


# The states a job ends in (squeue keeps ended jobs for the test cluster's MinJobAge, an hour).
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL"}


def _sbatch(script: Path, env: dict) -> str:
    """The script submitted from its folder (its output in slurm-JOBID.out there): the job's id."""
    out = script.parent / "slurm-%j.out"
    proc = subprocess.run(
        ["sbatch", "--parsable", f"--output={out}", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        cwd=script.parent,
    )
    return proc.stdout.split(";")[0].strip().splitlines()[0]


def _ended(env: dict, job_id: str, timeout_s: float) -> str:
    """The job's state once it has ended, polled: `sbatch --wait` backs off (~10 s for a 1 s job,
    test_slurm_cluster.py)."""
    return wait_for(lambda: (state := squeue(env, job_id)) in ENDED and state, timeout_s=timeout_s)


def _output(tmp_path: Path, job_id: str) -> str:
    return (tmp_path / f"slurm-{job_id}.out").read_text()


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.multiprocess
def test_user_sbatch_script_runs_two_nodes_to_the_end(slurm_env, small_lmdb, tmp_path):
    """The template, sbatch'ed as a user would: srun starts 2 tasks on 2 nodes, one run directory, one result."""
    job_id = _sbatch(_script(tmp_path, small_lmdb, env=slurm_env), slurm_env)
    state = _ended(slurm_env, job_id, timeout_s=300)
    out = _output(tmp_path, job_id)
    assert state == "COMPLETED", out
    paths = RunPaths(tmp_path / "runs" / f"dali-launch-{job_id}.0")
    assert [p.name for p in (tmp_path / "runs").iterdir() if p.name != ".compile-cache"] == [paths.root.name]
    result = json.loads(paths.result.read_text())
    assert len(result["checksums"]) == 2 and len(set(result["checksums"])) == 1
    assert [r["host"] for r in json.loads(paths.rank_map.read_text())] == ["node1", "node2"]
    assert out.count("done: test accuracy") == 1  # process 0 reports; the other task says nothing of it
    assert "epoch 0: loss" in paths.log(0).read_text() and paths.log(1).exists()
    status = dali_launch("status", str(paths.root), env=slurm_env)
    assert "finished; epoch 0 test accuracy" in status.stdout


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.multiprocess
def test_inside_salloc_one_task_per_gpu_a_task_resume_in_a_new_allocation_and_refusals(slurm_env, small_lmdb, tmp_path):
    """A salloc of 2 nodes × 2 tasks: `srun ... task` trains with 4 tasks of one device each. A second salloc,
    a new job: `srun ... task --resume RUN` (RUN by its name, the first job's) goes on there: the epoch done is
    kept, the second trained, one result, the new job's step recorded. In it `srun ... train` and a --nodes
    larger than the allocation are refused by every task, with nothing written."""
    cli = f"{sys.executable} -m dali_launch.launcher.cli"
    common = f"{' '.join(CPU)} --data-dir {small_lmdb}"
    root = tmp_path / "runs"
    run = RunPaths(root / "dali-launch-$SLURM_JOB_ID.0")  # its files as the shell names them
    first_shell = "\n".join(
        [
            f"srun {cli} task --gpus-per-node 2 {common} --run-root {root} > {tmp_path}/task.out 2>&1",
            f"echo $? > {tmp_path}/task.rc",
            f"cp {run.result} {tmp_path}/first-result.json; cp {run.rank_map} {tmp_path}/first-ranks.json",
            "echo $SLURM_JOB_ID",
        ]
    )
    job_id = in_salloc(first_shell, 2, 300, slurm_env)
    task_out = (tmp_path / "task.out").read_text()
    assert (tmp_path / "task.rc").read_text().strip() == "0", task_out
    paths = RunPaths(root / f"dali-launch-{job_id}.0")
    ranks = json.loads((tmp_path / "first-ranks.json").read_text())
    assert [(r["host"], len(r["devices"]), r["device_indices"]) for r in ranks] == [
        ("node1", 1, [0]),
        ("node1", 1, [1]),
        ("node2", 1, [2]),
        ("node2", 1, [3]),
    ]
    first = json.loads((tmp_path / "first-result.json").read_text())
    assert len(first["checksums"]) == 4 and len(set(first["checksums"])) == 1

    second_shell = "\n".join(
        [
            f"srun {cli} task --resume {paths.root.name} --run-root {root} --epochs 2 "
            f"> {tmp_path}/second.out 2>&1; echo $? > {tmp_path}/second.rc",
            f"srun {cli} train {common} --run-root {tmp_path}/refused > {tmp_path}/train.out 2>&1; echo $? > {tmp_path}/train.rc",
            f"srun {cli} task --nodes 3 {common} --run-root {tmp_path}/refused > {tmp_path}/big.out 2>&1; echo $? > {tmp_path}/big.rc",
            "echo $SLURM_JOB_ID",
        ]
    )
    second_job = in_salloc(second_shell, 2, 300, slurm_env)
    assert second_job != job_id
    second = (tmp_path / "second.out").read_text()
    assert (tmp_path / "second.rc").read_text().strip() == "0", second
    assert second.count(f"resuming {paths.root} (started by `srun dali-launch task`); changed: --epochs 2") == 1
    assert "resumed from checkpoint" in second and second.count("done: test accuracy") == 1, second
    assert [json.loads(line)["epoch"] for line in paths.metrics.read_text().splitlines()] == [0, 1]
    step = json.loads(paths.step.read_text())  # the new job's step went on in the first job's directory
    assert (step["job_id"], step["step_id"]) == (second_job, "0"), step
    result = json.loads(paths.result.read_text())
    assert len(result["checksums"]) == 4 and len(set(result["checksums"])) == 1
    assert [p.name for p in root.iterdir() if p.name != ".compile-cache"] == [paths.root.name]

    for name, needle in (
        ("train", "`dali-launch train` runs one process, but this is task"),
        ("big", "--nodes 3 asks for more than the 2 nodes of this job step"),
    ):
        out = (tmp_path / f"{name}.out").read_text()
        assert (tmp_path / f"{name}.rc").read_text().strip() != "0" and out.count(needle) == 4, out
        assert "Traceback" not in out
    assert not (tmp_path / "refused").exists()


def test_task_resume_of_a_run_whose_tasks_were_not_slurms_is_refused(capsys, tmp_path, small_lmdb, monkeypatch):
    from dali_launch.launcher.route import directory
    from dali_launch.launcher.run_config import LaunchConfig, RunConfig

    run = RunConfig(launch=LaunchConfig(run_root=str(tmp_path / "made")))
    paths = directory.create(run, small_lmdb, "train")
    for key, value in {**STEP, "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(key, value)
    run_entry(
        capsys,
        tmp_path,
        ["task", "--resume", str(paths.root)],
        f"--resume {paths.root} was started by `dali-launch train`, whose tasks are not SLURM's; continue it with "
        f"`dali-launch --resume {paths.root}`",
    )


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.multiprocess
def test_preempted_job_requeues_and_resumes_in_its_run_directory(slurm_env, mnist_lmdb, tmp_path):
    """USR2 to the user's job (what --signal=USR2@90 sends): the tasks checkpoint, requeue the job, and the
    same script, run again by SLURM, reopens the run directory and finishes from the checkpoint."""
    env = {**os.environ, **slurm_env}
    script = _script(tmp_path, mnist_lmdb, "--checkpoint-every-steps", "0", "--epochs", "2", env=slurm_env)
    job_id = _sbatch(script, slurm_env)
    paths = RunPaths(tmp_path / "runs" / f"dali-launch-{job_id}.0")
    wait_for(lambda: paths.rank_report(1).exists(), timeout_s=120)
    time.sleep(2)
    subprocess.run(["scancel", "--signal=USR2", job_id], env=env, check=True, timeout=30)
    # SLURM holds a requeued batch job back ~2 minutes (its credential lifetime); the test lets it start now.
    wait_for(lambda: squeue(env, job_id) == "PENDING", timeout_s=120)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, check=True, timeout=30)
    state = _ended(slurm_env, job_id, timeout_s=240)
    out = _output(tmp_path, job_id)
    assert state == "COMPLETED", out
    assert f"job {job_id} requeued (1/3)" in out and f"job {job_id} restarted (1): reopening {paths.root}" in out
    assert "resumed from checkpoint" in out and out.count("done: test accuracy") == 1
    assert [p.name for p in (tmp_path / "runs").iterdir() if p.name != ".compile-cache"] == [paths.root.name]
    assert [json.loads(line)["epoch"] for line in paths.metrics.read_text().splitlines()] == [0, 1]
