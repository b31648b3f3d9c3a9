"""A submitted run's SLURM job, attached from its run directory (job.json): its state, logs and cancel.

Live while squeue lists it (or a task's lock is held here); once it has left the queue, its end is what
SLURM's accounting says where there is one (CANCELLED), what slurmstepd wrote into a rank's stderr
(a scancel), and what the run's own files say (backends/job.py).
"""

from __future__ import annotations

from pathlib import Path

from dali_launch.launcher.backends import follow, slurm_queue
from dali_launch.launcher.backends.job import BackendJob, JobRecord, RunState, ended_state, lock_holder, request_cancel
from dali_launch.launcher.backends.slurm_queue import WAITING
from dali_launch.trainer.run_dir import RunPaths


class SlurmJob(BackendJob):
    def __init__(self, paths: RunPaths, record: JobRecord):
        super().__init__(paths)
        self.record = record

    @property
    def job_id(self) -> str:
        return self.record.job_id

    @property
    def name(self) -> str:
        return f"job {self.job_id}"

    def submitit_job(self):
        """submitit's handle of the job (its files: logs, results), for reading only."""
        import submitit

        return submitit.SlurmJob(self.record.folder / "%j", self.job_id, tasks=tuple(range(self.num_tasks)))

    def queue_state(self) -> str | None:
        """squeue's word for the job (RUNNING, PENDING, ...), or None once it left the queue."""
        return slurm_queue.queue_state(self.job_id)

    def live_state(self) -> RunState | None:
        if lock_holder(self.paths):  # a task of it runs on this host
            return RunState.RUNNING
        word = self.queue_state()
        if word is None:
            return None
        # RUNNING, COMPLETING, ... and UNKNOWN (squeue did not answer in time): running, so never resumed twice
        return RunState.PENDING if word in WAITING else RunState.RUNNING

    def settle(self, say=print) -> None:
        """A job whose tasks have ended but that SLURM still reaps (COMPLETING): waited for, bounded."""
        if self.queue_state() == "COMPLETING" and not lock_holder(self.paths):
            say(
                f"job {self.job_id} is ending (COMPLETING: SLURM reaps its tasks); waiting up to "
                f"{slurm_queue.RELEASE_TIMEOUT_S} s for it to leave the queue"
            )
            slurm_queue.wait_until_gone(self.job_id)

    def ended(self) -> RunState:
        accounted = slurm_queue.accounting_state(self.job_id) or ""
        cancelled = accounted.startswith("CANCELLED") or follow.cancelled_at(self.submitit_job()) is not None
        return ended_state(self.paths, cancelled)

    def logs(self, rank: int) -> list[Path]:
        from submitit.core.utils import JobPaths

        files = JobPaths(self.record.folder / "%j", self.job_id, task_id=rank)
        return [files.stdout, files.stderr]

    def cancel(self, say=print) -> int:
        if self.queue_state() is None:
            say(f"job {self.job_id} is not in the queue any more; nothing to cancel")
            return 0
        request_cancel(self.paths)
        slurm_queue.cancel(self.job_id)
        say(f"cancelled job {self.job_id}")
        return 0
