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
    return queue_entry(job_id)[0]


def queue_entry(job_id: str) -> tuple[str | None, str]:
    """The job's state and squeue's reason for it (%r: why a pending job waits, "None" when it does not),
    in one call; (None, "") once it has left the queue, ("UNKNOWN", "") when squeue does not answer in time."""
    if shutil.which("squeue") is None:
        return None, ""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", str(job_id), "-o", "%T %r"], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return "UNKNOWN", ""
    lines = out.stdout.splitlines() if out.returncode == 0 else []  # squeue errors on ids it no longer knows
    if not lines or not lines[0].strip():
        return None, ""
    state, _, reason = lines[0].strip().partition(" ")
    return state, reason.strip()


def waiting_line(job_id: str, state: str, reason: str) -> str:
    """What a queued job waits for, in squeue's words and ours."""
    gloss = REASONS.get(reason.split(",")[0])
    return f"job {job_id} is {state.lower()} in the queue: {reason}" + (f" ({gloss})" if gloss else "")


# squeue's commonest reasons for a pending job, said plainly
REASONS = {
    "Resources": "the nodes it asks for are busy",
    "Priority": "jobs of higher priority go first",
    "BeginTime": "its start time has not come: SLURM holds a requeued job back a while",
    "Dependency": "it waits for another job",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its --time-min is over the partition's limit",
    "JobHeldUser": "held: `scontrol release JOB` lets it run",
    "JobHeldAdmin": "held by an administrator",
}


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
