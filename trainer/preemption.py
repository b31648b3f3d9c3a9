"""Preemption and time limits: SLURM's warning signal -> an agreed checkpoint -> requeue.

SLURM sends SIGUSR2 (`#SBATCH --signal`, set by submitit) to every task some time before it ends
the job. The handler only raises a flag; at the loop's next check point, which every process
reaches at the same device call, the processes agree (any flag set -> all stop there), write one
checkpoint and process 0 asks SLURM to requeue the job. The requeued job runs the same task,
which resumes from that checkpoint.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

REQUEUE_WAIT_S = 300  # SLURM kills a requeued job's tasks; if it never does, give up and fail


class Preemption:
    def __init__(self):
        self.requested = False
        # Replaces submitit's own USR2 handler: it would requeue at once, before our checkpoint.
        signal.signal(signal.SIGUSR2, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.requested = True

    def agreed(self, *also: bool) -> list[bool]:
        """[any process signalled, any process's `also[i]` true, ...], the same on every process.

        A collective (all processes call it at the same point); other per-process decisions, like a
        clock saying a checkpoint is due, ride along so every process acts alike.
        """
        local = np.array([self.requested, *also], np.int32)
        if jax.process_count() == 1:
            return [bool(v) for v in local]
        flags = np.asarray(multihost_utils.process_allgather(local)).reshape(-1, local.size)
        return [bool(v) for v in flags.max(axis=0)]


def requeue_or_exit(max_requeues: int, run_dir: str) -> None:
    """After the checkpoint: process 0 requeues the job (within --max-requeues); nobody returns."""
    job_id = os.environ.get("SLURM_JOB_ID")
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    if job_id is None or restarts >= max_requeues:
        why = "not a SLURM job" if job_id is None else f"--max-requeues {max_requeues} reached"
        sys.exit(f"dali-launch: preempted; checkpoint written ({why}); continue with "
                 f"`dali-launch --resume {run_dir}`")
    if jax.process_index() == 0:
        subprocess.run(["scontrol", "requeue", job_id], check=False, timeout=60)
        print(f"preempted: checkpoint written, job {job_id} requeued ({restarts + 1}/{max_requeues})", flush=True)
    time.sleep(REQUEUE_WAIT_S)  # SLURM ends this incarnation; returning would report success
    sys.exit(f"dali-launch: job {job_id} was not requeued within {REQUEUE_WAIT_S} s; resume with "
             f"`dali-launch --resume {run_dir}`")
