"""`dali-launch status / logs / cancel`: a submitted job, found by its id or its run directory."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from dali_launch.launcher.follow import QUERY_TIMEOUT_S, LogTail, cancel, queue_state
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths


class SubmittedRun:
    """A run directory that holds a SLURM job (job.json, written at submission)."""

    def __init__(self, paths: RunPaths):
        self.paths = paths
        info = json.loads((paths.root / "job.json").read_text())
        self.job_id, self.folder = str(info["job_id"]), Path(info["submitit"])
        self.num_tasks = json.loads(paths.config.read_text())["distributed"]["num_processes"]

    def log(self, rank: int, stream: str = "out") -> Path:
        return self.folder / self.job_id / f"{self.job_id}_{rank}_log.{stream}"


def find(job: str, run_root: str) -> SubmittedRun:
    """JOB is a run directory, or a job id looked up among the runs under --run-root."""
    path = Path(job)
    if (path / "job.json").is_file():
        return SubmittedRun(RunPaths(path))
    root = Path(run_root)
    for run in sorted(root.glob("*/job.json"), reverse=True):
        if str(json.loads(run.read_text()).get("job_id")) == job:
            return SubmittedRun(RunPaths(run.parent))
    raise UsageError(f"no run of job {job} under --run-root {root.absolute()}; pass its run directory instead")


def status(run: SubmittedRun) -> str:
    """One line: the queue's state, else accounting's (sacct) where it exists, else what files say."""
    state = queue_state(run.job_id) or _sacct_state(run.job_id) or _state_from_files(run)
    metrics = run.paths.metrics
    last = json.loads(metrics.read_text().splitlines()[-1]) if metrics.exists() and metrics.read_text() else None
    progress = f"; epoch {last['epoch']} test accuracy {last['test_accuracy']:.4f}" if last else ""
    return f"job {run.job_id}: {state}{progress}; run directory {run.paths.root}"


def _sacct_state(job_id: str) -> str | None:
    if shutil.which("sacct") is None:
        return None
    try:
        out = subprocess.run(["sacct", "-n", "-X", "-j", job_id, "-o", "State"], capture_output=True, text=True,
                             timeout=QUERY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    words = out.stdout.split() if out.returncode == 0 else []
    return words[0] if words else None


def _state_from_files(run: SubmittedRun) -> str:
    """Without the queue or accounting: a result file per rank means it finished."""
    results = list((run.folder / run.job_id).glob("*_result.pkl"))
    if run.paths.result.exists():
        return "COMPLETED"
    return "ENDED (failed or cancelled)" if len(results) < run.num_tasks else "ENDED"


def logs(run: SubmittedRun, rank: int | None, follow_s: float | None, echo=print) -> None:
    """Prints rank logs (all ranks prefixed, or one); with follow, until the job leaves the queue."""
    ranks = [rank] if rank is not None else list(range(run.num_tasks))
    if any(r < 0 or r >= run.num_tasks for r in ranks):
        raise UsageError(f"--rank {rank} is out of range; job {run.job_id} has ranks 0..{run.num_tasks - 1}")
    tails = [(r, LogTail(run.log(r, s))) for r in ranks for s in ("out", "err")]
    deadline = time.monotonic() + (follow_s or 0)
    while True:
        for r, tail in tails:
            for line in tail.lines():
                echo(line if rank is not None else f"[rank {r}] {line}")
        if follow_s is None or queue_state(run.job_id) is None or time.monotonic() > deadline:
            break
        time.sleep(1)
    for r, tail in tails:  # the last line may lack its newline
        if tail.partial:
            echo(tail.partial.decode(errors="replace") if rank is not None else f"[rank {r}] {tail.partial.decode()}")


def cancel_job(run: SubmittedRun) -> str:
    if queue_state(run.job_id) is None:
        return f"job {run.job_id} is not in the queue any more; nothing to cancel"
    cancel(run.job_id)
    return f"cancelled job {run.job_id}"
