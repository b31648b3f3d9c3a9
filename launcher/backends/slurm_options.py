"""The one table from a run's settings to sbatch's options, and the srun arguments of its step.

Read alike by the submission (submitit's executor, slurm.py), the user's own script (`dali-launch slurm
template`, slurm_template.py) and the --sbatch-arg check (slurm_checks.py), so the three cannot drift:
a value is spelled once (memory in sbatch's documented suffix, `G`), and an --sbatch-arg that would
replace an option written here is refused with the flag that sets it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dali_launch.launcher.run_config import RunConfig


@dataclass(frozen=True)
class Option:
    key: str  # sbatch's option: #SBATCH --KEY=VALUE (a True value: a bare --KEY)
    flag: str  # what sets it, for the refusal of an --sbatch-arg KEY=...
    value: Callable[[RunConfig], object]  # None: not written
    param: str | None = None  # submitit's parameter name; None: one of its additional_parameters
    open: bool = False  # an --sbatch-arg may still give it (values our flags cannot express)


def _gpus(run: RunConfig):
    return None if run.distributed.platform == "cpu" else run.launch.gpus_per_node  # CPU devices: ask for no GPU


def _mincpus(run: RunConfig):
    """A --nodes range gives srun the tasks per node (srun_args); --mincpus keeps room for them on every node."""
    tasks = run.tasks_per_node
    return tasks * (run.slurm.cpus_per_task or 1) if run.nodes_vary and tasks > 1 else None


OPTIONS = (
    Option("job-name", "--name", lambda run: run.launch.name, "job_name"),
    # A range stays text ("1-2"); SLURM picks the count at each start.
    Option("nodes", "--nodes", lambda run: run.launch.nodes if run.nodes_vary else run.nodes, "nodes"),
    # With a range, an #SBATCH --ntasks-per-node fixes the job's task count at MIN × tasks and caps its
    # nodes at MIN (Slurm 22.05, measured: a 1-2 job got one node of two idle ones): srun gets it instead.
    Option(
        "ntasks-per-node",
        "--tasks-per-node",
        lambda run: None if run.nodes_vary else run.tasks_per_node,
        "ntasks_per_node",
    ),
    Option("mincpus", "--cpus-per-task (a --nodes range sets it from --tasks-per-node)", _mincpus),
    Option("gpus-per-node", "--gpus-per-node", _gpus, "gpus_per_node"),
    Option("time", "--time-min", lambda run: run.slurm.time_min, "time"),
    Option("partition", "--partition", lambda run: run.slurm.partition, "partition"),
    Option("account", "--account", lambda run: run.slurm.account, "account"),
    Option("qos", "--qos", lambda run: run.slurm.qos, "qos"),
    Option("constraint", "--constraint", lambda run: run.slurm.constraint, "constraint"),
    Option("cpus-per-task", "--cpus-per-task", lambda run: run.slurm.cpus_per_task, "cpus_per_task"),
    Option("mem", "--mem-gb", lambda run: f"{run.slurm.mem_gb}G" if run.slurm.mem_gb else None, "mem", open=True),
    Option("exclusive", "--exclusive", lambda run: True if run.slurm.exclusive else None, "exclusive", open=True),
)
# Written by submitit (its logs, the requeue signal) or by us for preemption (trainer/resilience/preemption.py):
# the job's files and its requeue depend on them.
OWN = ("output", "error", "open-mode", "signal", "requeue")
SET_BY_US = {
    **{o.key: f"use {o.flag}" for o in OPTIONS if not o.open},
    **{key: "dali-launch needs its own value to find the logs and to requeue the job" for key in OWN},
}


# A SIGUSR2 that reaches a task before its Python has a handler (`scancel --signal=USR2` as the job starts,
# the warning of a --time-min inside its lead) would end the task by its default action, the job unrequeued.
# So the step's command starts under coreutils' `env --block-signal=USR2` (8.31 and later): the signal waits,
# pending across exec, until the trainer's first line installs its handler and unblocks it
# (trainer/resilience/preemption.py, catch_early). The batch script asks this node's env whether it can;
# where it cannot, the variable is empty and the task starts as before.
HOLD_USR2 = "DALI_LAUNCH_HOLD_USR2"
HOLD_USR2_SETUP = f'{HOLD_USR2}=$(env --block-signal=USR2 true 2>/dev/null && echo "env --block-signal=USR2")'


# `scancel --signal=USR2 JOB` reaches the job's steps alone, never its batch shell: before srun's step exists (the
# job's first ~50 ms here, longer behind slow --setup lines) no process receives it, and SLURM drops it. `scancel
# --full` (or --batch) reaches the batch shell too, whose default action for USR2 ended it: the job FAILED, "not
# started". So the batch shell's first commands trap USR2: the trap notes it in a file of this start of the job,
# which EARLY_USR2 names to the tasks (each reads it at its start: trainer/resilience/preemption.py), and passes
# it to srun, which hands it to the step's tasks once they exist. bash runs a trap only once its foreground
# command ends, so srun runs in the background, waited for (a function of that name: submitit writes the line
# that calls it); its exit status is the function's. srun starts with USR2 ignored: --full signals it too, and
# one that came before srun set its own handler (which hands USR2 on) killed it, and the job with it.
SRUN_PID = "DALI_LAUNCH_SRUN"


def early_usr2_setup(folder: str) -> list[str]:
    """The batch script's first lines; `folder`: where the note goes, as shell text (quoted, absolute)."""
    from dali_launch.trainer.resilience.preemption import EARLY_USR2  # here: the CLI starts without numpy

    note, srun = f"{folder}/usr2-${{SLURM_JOB_ID}}-${{SLURM_RESTART_COUNT:-0}}", f"${SRUN_PID}"
    noted = f'mkdir -p "${{{EARLY_USR2}%/*}}" && : > "${EARLY_USR2}"'
    return [
        f"export {EARLY_USR2}={note}",
        f"trap '{noted}; kill -USR2 ${{{SRUN_PID}:-}} 2>/dev/null' USR2",
        f"srun() {{ local s; (trap '' USR2; exec srun \"$@\") & {SRUN_PID}=$!; "
        f"while wait {srun}; s=$?; kill -0 {srun} 2>/dev/null; do :; done; return $s; }}",
    ]


def held(command: str) -> str:
    """A step's command started with SIGUSR2 blocked where this node's env can (HOLD_USR2_SETUP set the variable)."""
    return f"${{{HOLD_USR2}}} {command}"


def sbatch_values(run: RunConfig) -> dict[str, object]:
    """sbatch option -> value for this run, in the table's order; unset ones left out."""
    values = {o.key: o.value(run) for o in OPTIONS}
    return {key: value for key, value in values.items() if value is not None}


def srun_args(run: RunConfig) -> list[str]:
    """The step's srun arguments: a --nodes range's tasks per node (see ntasks-per-node above); a rank
    that dies takes its step down at once (the others would wait in a collective); the user's; the container."""
    tasks = [f"--ntasks-per-node={run.tasks_per_node}"] if run.nodes_vary else []
    container = ["--container-image", run.slurm.container_image] if run.slurm.container_image else []
    return [*tasks, "--kill-on-bad-exit=1", *run.slurm.srun_arg, *container]


def executor_parameters(run: RunConfig, extra_sbatch: dict) -> dict:
    """The table's values as submitit's SlurmExecutor takes them: its own parameters, the rest (and
    `extra_sbatch`) as additional_parameters."""
    values = sbatch_values(run)
    params = {o.param: values[o.key] for o in OPTIONS if o.param and o.key in values}
    additional = {o.key: values[o.key] for o in OPTIONS if not o.param and o.key in values}
    return {**params, "additional_parameters": {**additional, **extra_sbatch}}
