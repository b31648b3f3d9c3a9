"""What SLURM says of a job: its queue state (squeue), its accounting state (sacct), and scancel.

Every call is bounded (QUERY_TIMEOUT_S) and none needs accounting: squeue answers for queued and
running jobs, sacct (where a site runs slurmdbd) for ended ones, and a missing command is no answer.
"""

from __future__ import annotations

import shutil
import subprocess
import time

QUERY_TIMEOUT_S = 30  # every squeue/sacct/scancel call is bounded
# A job whose tasks ended stays COMPLETING while slurmd reaps them (KillWait, 30 s by default) and runs
# the epilogue; --resume waits this long for it rather than refusing a run that has in fact stopped.
RELEASE_TIMEOUT_S = 90
# squeue's states of a job that waits to run (again); every other state it lists is a job that runs.
WAITING = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "CONFIGURING", "SUSPENDED"}
# How long a follower waits for a job that SLURM keeps queued (a busy cluster) before it stops following
# it; the job stays queued.
QUEUED_FOLLOW_S = 86400


def queue_state(job_id: str) -> str | None:
    """The job's state in squeue (PENDING, RUNNING, ...), or None once it has left the queue (or
    without squeue); UNKNOWN when squeue does not answer in time."""
    if shutil.which("squeue") is None:
        return None
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return "UNKNOWN"
    if out.returncode != 0:  # squeue errors on ids it no longer knows
        return None
    states = out.stdout.split()
    return states[0] if states else None


def wait_until_gone(job_id: str, timeout_s: float = RELEASE_TIMEOUT_S, poll_s: float = 0.5) -> bool:
    """Whether the job left the queue within `timeout_s`: after its tasks ended (or our scancel), so
    that the next command on its run directory does not find it COMPLETING."""
    deadline = time.monotonic() + timeout_s
    while queue_state(job_id) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def accounting_state(job_id: str) -> str | None:
    """How an ended job ended by SLURM's accounting (COMPLETED, CANCELLED, TIMEOUT, ...), or None without it."""
    if shutil.which("sacct") is None:
        return None
    try:
        out = subprocess.run(
            ["sacct", "-n", "-X", "-j", str(job_id), "-o", "State"],
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None
    words = out.stdout.split() if out.returncode == 0 else []
    return words[0] if words else None


def cancel(job_id: str) -> None:
    subprocess.run(["scancel", str(job_id)], capture_output=True, timeout=QUERY_TIMEOUT_S)
