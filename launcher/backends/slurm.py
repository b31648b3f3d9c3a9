"""SLURM through submitit: the executor, the only module that submits jobs (slurm_checks.py checks first).

Each task runs `dali_launch.trainer.task.run_task(RUN_DIR)`; submitit pickles that reference, so
the trainer never sees a launcher object.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dali_launch.launcher.backends import follow
from dali_launch.launcher.backends.base import Backend, Outcome
from dali_launch.launcher.backends.slurm_checks import (
    check_cluster,
    sbatch_pair,
    validate_slurm,
)
from dali_launch.launcher.config import RunConfig
from dali_launch.launcher.console import echo
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, write_atomic


class Slurm(Backend):
    """A SLURM job through submitit, followed until it ends (or left to run with --detach)."""

    name = spec_name = "slurm"
    started_by = "dali-launch"

    def check(self, run: RunConfig) -> None:
        validate_slurm(run)
        check_cluster(run)

    def plan(self, run: RunConfig, run_dir: Path, spec_json: str) -> str:
        """The exact batch script submitit would hand to sbatch."""
        return batch_script(make_executor(run, run_dir / "submitit", preview=True))

    def start(self, run: RunConfig, paths: RunPaths) -> None:
        self.run, self.paths, self.job = run, paths, submit(run, paths)
        echo(f"submitted job {self.job.job_id}; run directory: {paths.root}")

    def wait(self) -> Outcome:
        if self.run.slurm.detach:
            return Outcome(True)
        code = follow.follow(self.job, self.paths, timeout_s=follow_timeout_s(self.run), echo=echo)
        return Outcome(code == 0, "", code)

    def cancel(self) -> None:
        follow.cancel(self.job.job_id)


def executor_parameters(run: RunConfig) -> dict:
    """submitit's SlurmExecutor parameters for this run (sbatch names, submitit's spelling)."""
    s, launch = run.slurm, run.launch
    params = {
        "job_name": launch.name,
        "nodes": launch.nodes if run.nodes_vary else run.nodes,
        "ntasks_per_node": None if run.nodes_vary else run.tasks_per_node,
        "time": s.time_min,
        "partition": s.partition,
        "account": s.account,
        "qos": s.qos,
        "constraint": s.constraint,
        "cpus_per_task": s.cpus_per_task,
        "mem": f"{s.mem_gb}GB" if s.mem_gb else None,
        "exclusive": True if s.exclusive else None,
        "setup": list(s.setup) or None,
        "stderr_to_stdout": False,
    }
    if run.distributed.platform != "cpu":  # CPU devices stand in for GPUs: ask SLURM for none
        params["gpus_per_node"] = launch.gpus_per_node
    # A rank that dies takes its step down at once; the others would wait in a collective.
    srun = ["--kill-on-bad-exit=1", *s.srun_arg] + (
        ["--container-image", s.container_image] if s.container_image else []
    )
    # requeue: a preempted or timed-out job checkpoints and puts itself back (trainer/preemption.py)
    sbatch = {"requeue": True}
    if run.nodes_vary:
        srun, sbatch = _node_range(run, srun, sbatch)
    params["srun_args"] = srun
    params["additional_parameters"] = {**sbatch, **dict(sbatch_pair(a) for a in s.sbatch_arg)}
    return {k: v for k, v in params.items() if v is not None}


def _node_range(run: RunConfig, srun: list[str], sbatch: dict) -> tuple[list[str], dict]:
    """--nodes MIN-MAX. An #SBATCH --ntasks-per-node fixes the job's task count at MIN × tasks and caps
    its nodes at MIN (Slurm 22.05, measured: a 1-2 job got one node of two idle ones), so the tasks per
    node go to srun instead, and --mincpus keeps room for them on every node SLURM gives."""
    tasks = run.tasks_per_node
    if tasks > 1:
        sbatch = {**sbatch, "mincpus": tasks * (run.slurm.cpus_per_task or 1)}
    return [f"--ntasks-per-node={tasks}", *srun], sbatch


def make_executor(run: RunConfig, folder: Path, preview: bool = False):
    """submitit's SlurmExecutor for this run; `preview` renders the batch script on a machine without
    SLURM's commands (a dry run from a laptop), where submitit itself refuses to start."""
    import submitit

    class Executor(submitit.SlurmExecutor):
        def _num_tasks(self) -> int:  # submitit multiplies `nodes`: a range ("1-2") is text; count the most
            return run.num_processes

    class Preview(Executor):
        @classmethod
        def affinity(cls) -> int:  # submitit's check that `srun` exists
            return 1

    executor = (Preview if preview else Executor)(folder=folder / "%j", max_num_timeout=0)
    executor.update_parameters(**executor_parameters(run))
    return executor


def batch_script(executor) -> str:
    """The exact text submitit writes and hands to sbatch for this executor.

    submitit renders it in `_make_submission_file_text`, which depends only on the executor's
    folder and parameters; calling it shows the real script instead of a second template of ours.
    tests/test_slurm.py holds this equal to the file a real submission leaves behind.
    """
    return executor._make_submission_file_text(executor._submitit_command_str, "dry-run")


def follow_timeout_s(run: RunConfig) -> int:
    """SLURM ends the job at its time limit; allow for the queue and the start on top."""
    return run.slurm.time_min * 60 + 300


def submit(run: RunConfig, paths: RunPaths):
    """Submits the run's tasks; a refused new submission leaves no run directory."""
    from dali_launch.trainer.task import run_task

    try:
        job = make_executor(run, paths.submitit).submit(run_task, str(paths.root))
    except Exception as e:
        if not run.launch.resume:
            shutil.rmtree(paths.root, ignore_errors=True)
        raise UsageError(f"sbatch refused the job: {str(e).strip().splitlines()[-1]}") from None
    write_atomic(paths.root / "job.json", json.dumps({"job_id": job.job_id, "submitit": str(paths.submitit)}))
    return job
