"""The SLURM job step this process is one task of (srun's variables), read without starting anything.

Both `train` (which refuses to be one of several tasks) and the in-allocation backend ask it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.topology import SLURM_ENV

COMMAND = "srun dali-launch task"


@dataclass(frozen=True)
class Step:
    """The SLURM job step this process is one task of, as srun describes it."""

    job_id: str
    step_id: str
    process_id: int
    num_tasks: int
    num_nodes: int
    tasks_per_node: tuple[int, ...]  # per node of the step
    restarts: int  # how often the job was requeued (SLURM_RESTART_COUNT)
    gpus_on_node: int | None  # SLURM_GPUS_ON_NODE: what the job holds on this node, when it asked for GPUs


def step_of(env=None) -> Step | None:
    """This process's job step, or None outside one (no srun: a login node, an salloc shell, a batch script)."""
    env = os.environ if env is None else env
    get = lambda key, default=None: env.get(SLURM_ENV[key], default)
    if SLURM_ENV["job_id"] not in env or SLURM_ENV["step_id"] not in env:
        return None
    num_tasks = int(get("step_num_tasks") or get("num_processes") or 1)
    return Step(
        job_id=get("job_id"),
        step_id=get("step_id"),
        process_id=int(get("process_id", 0)),
        num_tasks=num_tasks,
        num_nodes=int(get("step_num_nodes") or get("num_nodes") or 1),
        tasks_per_node=expand_counts(get("step_tasks_per_node") or str(num_tasks)),
        restarts=int(get("restart_count") or 0),
        gpus_on_node=int(get("gpus_on_node")) if get("gpus_on_node") else None,
    )


def expand_counts(text: str) -> tuple[int, ...]:
    """SLURM's per-node counts, `2(x3),1` -> (2, 2, 2, 1)."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match:
            counts += [int(match.group(1))] * int(match.group(2) or 1)
    return tuple(counts)


def refuse_one_of_several(env=None) -> None:
    """`dali-launch train` under an srun of N tasks would train N times, each alone calling itself rank 0."""
    step = step_of(env)
    if step is not None and step.num_tasks > 1:
        raise UsageError(
            f"`dali-launch train` runs one process, but this is task {step.process_id} of "
            f"{step.num_tasks} of SLURM job step {step.job_id}.{step.step_id}: each would train alone; "
            f"to train with all {step.num_tasks} tasks use `{COMMAND}` with the same flags"
        )
