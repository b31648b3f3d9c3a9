"""The one requeue/cancel policy: what a task asks of SLURM when its job must end early.

Both a preempted job (preemption.py) and a stuck one (watchdog.py, --on-stuck requeue) requeue
within --max-requeues; anything else cancels. Only a task SLURM started knows a job (topology reads
SLURM's variables only then): a `train` run inside an salloc never requeues or cancels the salloc.
"""

from __future__ import annotations

import subprocess

from dali_launch.trainer.topology import Topology

QUERY_TIMEOUT_S = 60


def may_requeue(topology: Topology, max_requeues: int) -> bool:
    return topology.job_id is not None and topology.restart_count < max_requeues


def requeue(topology: Topology) -> None:
    subprocess.run(["scontrol", "requeue", topology.job_id], check=False, timeout=QUERY_TIMEOUT_S, capture_output=True)


def cancel(topology: Topology) -> None:
    subprocess.run(["scancel", topology.job_id], check=False, timeout=QUERY_TIMEOUT_S, capture_output=True)
