"""SLURM through submitit: the only module that knows sbatch, srun and squeue.

Each task runs `dali_launch.trainer.task.run_task(RUN_DIR)`; submitit pickles that reference, so
the trainer never sees a launcher object.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from dali_launch.launcher import datasets, plan, runs
from dali_launch.launcher.config import RunConfig, validate
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, write_atomic

JOB_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")
SBATCH_KEY = re.compile(r"^[a-z][a-z0-9-]*$")
QUERY_TIMEOUT_S = 30  # every squeue/sinfo/scancel call is bounded


def executor_parameters(run: RunConfig) -> dict:
    """submitit's SlurmExecutor parameters for this run (sbatch names, submitit's spelling)."""
    s, launch = run.slurm, run.launch
    params = {"job_name": launch.name, "nodes": launch.nodes, "ntasks_per_node": run.tasks_per_node,
              "time": s.time_min, "partition": s.partition, "account": s.account, "qos": s.qos,
              "constraint": s.constraint, "cpus_per_task": s.cpus_per_task,
              "mem": f"{s.mem_gb}GB" if s.mem_gb else None, "exclusive": True if s.exclusive else None,
              "setup": list(s.setup) or None, "stderr_to_stdout": False}
    if run.distributed.platform != "cpu":  # CPU devices stand in for GPUs: ask SLURM for none
        params["gpus_per_node"] = launch.gpus_per_node
    srun = list(s.srun_arg) + (["--container-image", s.container_image] if s.container_image else [])
    if srun:
        params["srun_args"] = srun
    extra = dict(_sbatch_pair(a) for a in s.sbatch_arg)
    if extra:
        params["additional_parameters"] = extra
    return {k: v for k, v in params.items() if v is not None}


def _sbatch_pair(arg: str) -> tuple[str, str]:
    key, sep, value = arg.partition("=")
    if not sep or not SBATCH_KEY.match(key) or "\n" in value:
        raise UsageError(f"--sbatch-arg {arg!r} is not KEY=VALUE with a lowercase sbatch option name "
                         f"(e.g. mail-type=END)")
    return key, value


def make_executor(run: RunConfig, folder: Path):
    import submitit

    executor = submitit.SlurmExecutor(folder=folder / "%j", max_num_timeout=0)
    executor.update_parameters(**executor_parameters(run))
    return executor


def batch_script(executor) -> str:
    """The exact text submitit writes and hands to sbatch for this executor.

    submitit renders it in `_make_submission_file_text`, which depends only on the executor's
    folder and parameters; calling it shows the real script instead of a second template of ours.
    tests/test_slurm.py holds this equal to the file a real submission leaves behind.
    """
    return executor._make_submission_file_text(executor._submitit_command_str, "dry-run")


def validate_slurm(run: RunConfig) -> None:
    if not JOB_NAME.match(run.launch.name):
        raise UsageError(f"--name {run.launch.name!r} must be 1-64 letters, digits or . _ + -")
    if run.slurm.time_min < 1:
        raise UsageError(f"--time-min {run.slurm.time_min} must be at least 1")
    for arg in run.slurm.sbatch_arg:
        _sbatch_pair(arg)
    if any("\n" in line for line in run.slurm.setup):
        raise UsageError("a --setup line contains a newline; pass each shell line as its own --setup")
    _check_partition(run)


def _check_partition(run: RunConfig) -> None:
    """What sinfo knows of the partition, checked before submitting (skipped where sinfo is absent)."""
    if shutil.which("sinfo") is None:
        return
    args = ["sinfo", "-h", "-o", "%P|%D|%c|%G"] + (["-p", run.slurm.partition] if run.slurm.partition else [])
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S).stdout
    except subprocess.TimeoutExpired:
        return
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 3]
    if run.slurm.partition is None:
        rows = [r for r in rows if r[0].endswith("*")] or rows
    if not rows:
        if run.slurm.partition:
            raise UsageError(f"--partition {run.slurm.partition} does not exist (sinfo); see `sinfo -s`")
        return
    nodes = sum(int(r[1]) for r in rows)
    if run.launch.nodes > nodes:
        raise UsageError(f"--nodes {run.launch.nodes} is more than the {nodes} nodes of partition {rows[0][0]}")
    if run.distributed.platform != "cpu":
        gpus = max((_gpu_count(r[3]) for r in rows), default=0)
        if gpus == 0:
            raise UsageError(f"partition {rows[0][0].rstrip('*')} has no GPUs (sinfo shows no gpu GRES); "
                             f"choose a GPU --partition, or --platform cpu")
        if run.launch.gpus_per_node > gpus:
            raise UsageError(f"--gpus-per-node {run.launch.gpus_per_node} is more than the {gpus} GPUs "
                             f"a node of partition {rows[0][0].rstrip('*')} has")


def _gpu_count(gres: str) -> int:
    return sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres))


def launch(run: RunConfig) -> int:
    validate(run)
    validate_slurm(run)
    data_dir = datasets.resolve(run.data.data_dir)
    if run.launch.dry_run:
        print(plan.describe(run))
        print(batch_script(make_executor(run, Path(run.launch.run_root).absolute() / "RUN_DIR" / "submitit")))
        return 0
    job, paths = submit(run, data_dir)
    print(f"submitted job {job.job_id}; run directory: {paths.root}", flush=True)
    if run.slurm.detach:
        return 0
    from dali_launch.launcher.follow import follow

    return follow(job, paths, timeout_s=follow_timeout_s(run))


def follow_timeout_s(run: RunConfig) -> int:
    """SLURM ends the job at its time limit; allow for the queue and the start on top."""
    return run.slurm.time_min * 60 + 300


def submit(run: RunConfig, data_dir: Path):
    """Writes the run directory and submits its tasks; a refused submission leaves no directory."""
    paths = runs.create(run, data_dir, "slurm")
    from dali_launch.trainer.task import run_task

    try:
        job = make_executor(run, paths.submitit).submit(run_task, str(paths.root))
    except Exception as e:
        shutil.rmtree(paths.root, ignore_errors=True)
        raise UsageError(f"sbatch refused the job: {str(e).strip().splitlines()[-1]}") from None
    write_atomic(paths.root / "job.json", json.dumps({"job_id": job.job_id, "submitit": str(paths.submitit)}))
    return job, paths
