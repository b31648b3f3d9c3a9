"""The one requeue/cancel policy: what a task asks of SLURM when its job must end early.

Both a preempted job (preemption.py) and a stuck one (watchdog.py, --on-stuck requeue) requeue
within --max-requeues; anything else cancels. Only a task SLURM started knows a job (topology reads
SLURM's variables only then): a `train` run inside an salloc never requeues or cancels the salloc.
A requeue SLURM took is recorded in the run directory (requeues.jsonl: when, which start, why), since
nothing else there outlives it: the next start clears the ranks' endings, and `dali-launch status`
says why the job runs again.
"""

from __future__ import annotations

import json
import subprocess
import time

from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import Topology

QUERY_TIMEOUT_S = 60


def may_requeue(topology: Topology, max_requeues: int) -> bool:
    return topology.job_id is not None and topology.restart_count < max_requeues


def requeue(topology: Topology, paths: RunPaths, why: str) -> None:
    """`why`: what asked for it, as `status` says it after "requeued by" (a signal and the checkpoint's step)."""
    done = subprocess.run(
        ["scontrol", "requeue", topology.job_id], check=False, timeout=QUERY_TIMEOUT_S, capture_output=True
    )
    if done.returncode == 0:
        record(topology, paths, why)


def record(topology: Topology, paths: RunPaths, why: str) -> None:
    """A requeue SLURM took, one line of requeues.jsonl."""
    said = {"at": time.time(), "job_id": topology.job_id, "start": topology.restart_count, "why": why}
    with paths.requeues.open("a") as f:
        f.write(json.dumps(said) + "\n")


def cancel(topology: Topology) -> None:
    subprocess.run(["scancel", topology.job_id], check=False, timeout=QUERY_TIMEOUT_S, capture_output=True)
