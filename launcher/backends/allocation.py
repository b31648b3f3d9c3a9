"""In-allocation mode: the tasks of the user's own `srun` step are the run's tasks.

    #!/bin/bash
    #SBATCH --nodes=2 --ntasks-per-node=1 --gpus-per-node=8 --signal=USR2@90 --requeue
    srun dali-launch task --epochs 5 --data-dir /data/mnist    # `dali-launch slurm template` writes one

SLURM started the tasks, so nothing is submitted. Every task takes the one route (launcher/route/:
`dali-launch task` launches through it like any run): the same checks in every task, so a bad input ends each with the same line
and exit 2 before anything is written. Process 0 then makes the run directory RUN_ROOT/NAME-JOB.STEP
and the others wait for it: every task names it alike, and a requeued job keeps its id and numbers
its steps again from 0, so it reopens its directory and the trainer resumes from the checkpoint.
`srun dali-launch task --resume RUN` continues RUN (any run whose tasks SLURM started) in this step, its
shape a change that --resume checks as for any run; process 0 reopens RUN, the others wait for it.
Each task runs the trainer in its own process, which reads its rank from SLURM's variables
(config.json says `slurm`), exactly as in a job dali-launch submitted.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from dali_launch.launcher.backends.base import refuse_node_range
from dali_launch.launcher.backends.srun_step import COMMAND, Step, step_of
from dali_launch.launcher.backends.this_process import Train
from dali_launch.launcher.console import echo
from dali_launch.launcher.options import Values
from dali_launch.launcher.run_config import RunConfig, task_spec
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, read_json, write_atomic

POLL_S = 0.2  # how often the other tasks look for the run directory task 0 makes


def from_step(values: Values, env=None) -> Values:
    """The job's shape, where no flag gave it, from the step: its nodes, its tasks per node, and the GPUs
    SLURM gave each node (else one device per task). Flags that were given are checked, not replaced."""
    step = step_of(env)
    if step is None:
        return values
    filled = Values(values)
    filled.given = set(values.given)
    if "nodes" not in values.given:
        filled["nodes"] = str(step.num_nodes)
    if "tasks_per_node" not in values.given:
        filled["tasks_per_node"] = step.tasks_per_node[0] if step.tasks_per_node else 1
    if "gpus_per_node" not in values.given:
        filled["gpus_per_node"] = (
            step.gpus_on_node if step.gpus_on_node and values.get("platform") != "cpu" else filled["tasks_per_node"]
        )
    if values.get("resume"):  # the step's shape is where the run goes on: changes --resume checks (elastic)
        filled.given |= {"nodes", "tasks_per_node", "gpus_per_node"}
    return filled


class Allocation(Train):
    """One task of the user's srun step: checks, the shared run directory, then the trainer in this process."""

    name, spec_name, started_by = "allocation", "slurm", COMMAND

    def __init__(self, env=None):
        self.env = os.environ if env is None else env
        self.step = step_of(self.env)
        self.process_id = self.step.process_id if self.step else 0

    def check(self, run: RunConfig) -> None:
        step = self.step
        if step is None:
            where = (
                f"inside SLURM job {self.env['SLURM_JOB_ID']} but not in a job step"
                if "SLURM_JOB_ID" in self.env
                else "outside any SLURM allocation (no SLURM_JOB_ID)"
            )
            raise UsageError(
                f"`dali-launch task` is one task of a SLURM job step, and this is {where}; start it as "
                f"`{COMMAND} ...` in an sbatch script or salloc (`dali-launch slurm template` writes one)"
            )
        if run.launch.local:
            raise UsageError(
                "--local does not apply to `dali-launch task`: its tasks are SLURM's; leave --local out, or run "
                "`dali-launch --local ...` outside srun"
            )
        if len(set(step.tasks_per_node)) > 1:
            raise UsageError(
                f"job step {step.job_id}.{step.step_id} has uneven tasks per node "
                f"({','.join(map(str, step.tasks_per_node))}); start srun with --ntasks-per-node"
            )
        refuse_node_range(run, "a job step (its nodes are the step's)")
        _same("--nodes", run.nodes, step.num_nodes, "nodes", "SLURM_STEP_NUM_NODES")
        _same(
            "--tasks-per-node",
            run.tasks_per_node,
            step.tasks_per_node[0],
            "tasks per node",
            "SLURM_STEP_TASKS_PER_NODE",
        )
        gpus = run.devices_per_node
        if step.gpus_on_node is not None and run.distributed.platform != "cpu" and gpus > step.gpus_on_node:
            raise UsageError(
                f"--gpus-per-node {gpus} asks for more than the {step.gpus_on_node} GPUs the job holds "
                f"on this node (SLURM_GPUS_ON_NODE); ask sbatch/salloc for --gpus-per-node {gpus}"
            )

    def make_run_dir(self, run: RunConfig, data_dir: Path) -> RunPaths:
        """Process 0 makes (or, in a requeued job, reopens) RUN_ROOT/NAME-JOB.STEP; the others wait for it."""
        from dali_launch.launcher.route import directory

        step = self.step
        name = f"{directory.slug(run.launch.name)}-{step.job_id}.{step.step_id}"
        paths = RunPaths(Path(run.launch.run_root).absolute() / name)
        if step.process_id != 0:
            return _wait_for(paths, step, run.distributed.init_timeout_s)
        spec = task_spec(run, str(paths.root), str(data_dir), self.spec_name)
        if paths.config.is_file():
            if TaskSpec.load(paths.root).to_json() != spec.to_json():
                raise UsageError(
                    f"{paths.root} holds a run of job {step.job_id} with other settings (an earlier start "
                    f"of this step); keep the script's flags as they were, or choose another --name"
                )
            echo(f"job {step.job_id} restarted ({step.restarts}): reopening {paths.root}")
        else:
            paths = directory.create(run, data_dir, self.spec_name, name=name)
        self._record_step(paths)
        return paths

    def reopen_run_dir(self, run: RunConfig, data_dir: Path, changed: bool) -> RunPaths:
        """`task --resume RUN`: process 0 reopens RUN (rewritten where the resumption changed it) for this
        step; the others wait for it, as for a new run's directory."""
        if self.step.process_id != 0:
            return _wait_for(RunPaths(Path(run.launch.resume)), self.step, run.distributed.init_timeout_s)
        paths = super().reopen_run_dir(run, data_dir, changed)
        self._record_step(paths)
        return paths

    def _record_step(self, paths: RunPaths) -> None:
        """step.json: the step (and incarnation of its job) that now runs in the directory; the other tasks
        wait for it."""
        step = self.step
        record = {"job_id": step.job_id, "step_id": step.step_id, "restarts": step.restarts}
        write_atomic(paths.step, json.dumps({**record, "num_tasks": step.num_tasks}))


def _same(flag: str, asked: int, have: int, what: str, variable: str) -> None:
    if asked != have:
        more = "more" if asked > have else "fewer"
        raise UsageError(
            f"{flag} {asked} asks for {more} than the {have} {what} of this job step ({variable}); "
            f"run srun in an allocation of that shape (sbatch/salloc {flag} {asked}), or leave {flag} "
            f"out to take the step's"
        )


def _wait_for(paths: RunPaths, step: Step, timeout_s: int) -> RunPaths:
    """Until process 0 has made (or reopened) the run directory in this incarnation of the job."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        record = read_json(paths.step, {})  # this step's, not an earlier job's (task --resume)
        if tuple(map(record.get, ("job_id", "step_id", "restarts"))) == (step.job_id, step.step_id, step.restarts):
            return paths
        time.sleep(POLL_S)
    raise UsageError(
        f"process {step.process_id}: process 0 did not make the run directory {paths.root} within "
        f"{timeout_s} s (--init-timeout-s); see process 0's error"
    )
