"""SLURM through submitit: the executor, the only module that submits jobs (slurm_checks.py checks first).

Each task runs `dali_launch.trainer.task.run_task(RUN_DIR)`; submitit pickles that reference, so
the trainer never sees a launcher object. One run is one job, followed until it ends (follow.py) or
left to run (--detach); a sweep's runs are one job array (submitit's map_array; --max-parallel is its
%N), waited for until every element has left the queue. Either way each run's job.json is written
once sbatch took it, and a refused submission leaves no new run directory behind.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Protocol

from dali_launch.launcher.backends import follow, slurm_queue
from dali_launch.launcher.backends.base import Backend, Outcome, Watch
from dali_launch.launcher.backends.job import RunState, read_record, write_record
from dali_launch.launcher.backends.slurm_checks import check_cluster, sbatch_pair, validate_slurm
from dali_launch.launcher.backends.slurm_job import SlurmJob
from dali_launch.launcher.backends.slurm_options import (
    HOLD_USR2_SETUP,
    early_usr2_setup,
    executor_parameters,
    held,
    srun_args,
)
from dali_launch.launcher.console import echo
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths

POLL_S = 2.0  # how often an array's elements are asked for


class SideJob(Protocol):
    """A job submitted beside a run's own, in its run directory (cluster CI's test step), waited for after it."""

    def submit(self, run: RunConfig, paths: RunPaths) -> None: ...

    def wait(self, timeout_s: float) -> None: ...


class Slurm(Backend):
    """A SLURM job through submitit, followed until it ends (or left to run with --detach)."""

    name = spec_name = "slurm"
    started_by = "dali-launch"
    arrays = True

    def __init__(self, array_name: str | None = None, max_parallel: int | None = None, beside: tuple = ()):
        self.array_name, self.max_parallel = array_name, max_parallel  # a sweep's job array
        self.beside: tuple[SideJob, ...] = beside

    def check(self, run: RunConfig) -> None:
        validate_slurm(run)
        check_cluster(run, local_hint=not self.beside)  # cluster CI has no local form

    def dry_run(self, runs: list[RunConfig], run_dirs: list[Path], specs: list[str]) -> str:
        """The exact batch script submitit would hand to sbatch: the job's, or the array's."""
        if len(runs) == 1:
            return batch_script(make_executor(runs[0], run_dirs[0] / "submitit", preview=True))
        executor = self._array_executor(runs, run_dirs[0].parent / "submitit", preview=True)
        executor.parameters["map_count"] = len(runs)  # what map_array sets on its copy of the executor
        return batch_script(executor)

    def start(self, runs: list[RunConfig], paths: list[RunPaths]) -> list[SlurmJob]:
        """Submitted and left to run, as --detach leaves them: one run a job, several one job array; their jobs."""
        if len(runs) == 1:
            self._submit(runs[0], paths[0])
        else:
            jobs = self._submit_array(runs, paths, Watch())
            echo(f"submitted array job {jobs[0].job_id.split('_')[0]}: {len(jobs)} runs")
        return [self.attach(p) for p in paths]

    def run(self, run: RunConfig, paths: RunPaths) -> Outcome:
        job = self._submit(run, paths)
        if run.slurm.detach:
            return Outcome(RunState.PENDING, report=False)
        deadline = time.monotonic() + follow_timeout_s(run)
        try:
            code = follow.follow(job, paths, timeout_s=follow_timeout_s(run), echo=echo)
        except KeyboardInterrupt:  # the job is SLURM's: it goes on, and the user should know it and how to reach it
            return interrupted(job.job_id, paths)
        for side in self.beside:
            side.wait(max(0.0, deadline - time.monotonic()))
        if code == 0:
            return Outcome(RunState.FINISHED)
        return Outcome(self.attach(paths).state(), "", code)  # follow said why

    def _submit(self, run: RunConfig, paths: RunPaths):
        """submitit's job of the run, and the side jobs beside it."""
        job = submit(run, paths)
        echo(f"submitted job {job.job_id}; run directory: {paths.root}")
        for side in self.beside:
            side.submit(run, paths)
        return job

    def run_array(self, runs: list[RunConfig], paths: list[RunPaths], watch: Watch) -> list[Outcome]:
        jobs = self._submit_array(runs, paths, watch)
        if runs[0].slurm.detach:
            return [Outcome(RunState.PENDING, report=False) for _ in runs]
        try:
            return self._wait_array(paths, watch, follow_timeout_s(runs[0]))
        except KeyboardInterrupt:
            print(
                f"dali-launch: interrupted: the sweep's job array {jobs[0].job_id.split('_')[0]} goes on running; "
                f"see `dali-launch sweep status {paths[0].root.parent}`, stop an element with `dali-launch cancel RUN`",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(130) from None

    def _submit_array(self, runs: list[RunConfig], paths: list[RunPaths], watch: Watch) -> list:
        """submitit's jobs of the runs, one job array; each run's job.json written."""
        from dali_launch.trainer.task import run_task

        folder = paths[0].root.parent / "submitit"
        try:
            jobs = self._array_executor(runs, folder).map_array(run_task, [str(p.root) for p in paths])
        except Exception as e:
            raise UsageError(f"sbatch refused the array: {str(e).strip().splitlines()[-1]}") from None
        for job, p in zip(jobs, paths):  # `dali-launch status/logs/cancel RUN_DIR` find each element's job
            write_record(p, job.job_id, folder)
        watch.submitted([job.job_id for job in jobs])
        return jobs

    def _wait_array(self, paths: list[RunPaths], watch: Watch, timeout_s: float) -> list[Outcome]:
        """Until every element has left the queue, saying each end. `timeout_s` bounds an element's run: the
        deadline moves on while any element waits in the queue (the array's waves, a busy cluster, a requeue),
        for up to slurm_queue.QUEUED_FOLLOW_S; past it the rest are cancelled."""
        jobs, outcomes = [self.attach(p) for p in paths], {}
        end, queued_until = time.monotonic() + timeout_s, time.monotonic() + slurm_queue.QUEUED_FOLLOW_S
        while len(outcomes) < len(jobs):
            late = time.monotonic() > end
            for i, job in enumerate(jobs):
                if i in outcomes:
                    continue
                if late:
                    slurm_queue.cancel(job.job_id)
                    print(
                        f"dali-launch: {job.name} not done past its time limit (or a day queued); cancelled it",
                        file=sys.stderr,
                    )
                state = job.state()
                if state is RunState.PENDING and time.monotonic() < queued_until:
                    end = time.monotonic() + timeout_s
                if late or not state.live:
                    outcomes[i] = Outcome(state, code=0 if state is RunState.FINISHED else 1, report=False)
                    watch.ended(i, outcomes[i])
            time.sleep(0 if len(outcomes) == len(jobs) else POLL_S)
        return [outcomes[i] for i in range(len(jobs))]

    def _parallel(self, count: int) -> int:
        return min(self.max_parallel or count, count)

    def _array_executor(self, runs: list[RunConfig], folder: Path, preview: bool = False):
        executor = make_executor(runs[0], folder, preview)  # one job shape for every element
        executor.update_parameters(
            job_name=self.array_name or runs[0].launch.name, array_parallelism=self._parallel(len(runs))
        )
        return executor

    def attach(self, paths: RunPaths) -> SlurmJob:
        record = read_record(paths)
        if record is None:
            raise UsageError(f"{paths.root} holds no SLURM job (no job.json); it was not submitted")
        return SlurmJob(paths, record)


def interrupted(job_id: str, paths: RunPaths) -> Outcome:
    """Ctrl-C while following: the job goes on, queued or running as squeue says, and how to reach it."""
    state, reason = slurm_queue.queue_entry(job_id)
    if state in slurm_queue.WAITING:
        now, how = (
            RunState.PENDING,
            f"is still queued ({state.lower()}: {reason or 'no reason given'}); it stays queued",
        )
    else:
        now, how = RunState.RUNNING, "goes on running"
    return Outcome(
        now,
        f"interrupted: job {job_id} {how}; follow it again with `dali-launch logs {paths.root} --follow`, or stop "
        f"it with `dali-launch cancel {paths.root}`",
        130,
        report=False,
    )


def parameters(run: RunConfig, folder: Path) -> dict:
    """submitit's SlurmExecutor parameters for this run: the sbatch table (slurm_options.py), the step's
    srun arguments, the batch shell's trap of an early SIGUSR2 (noted in `folder`, submitit's), the --setup
    lines, then whether the tasks can start with SIGUSR2 held (slurm_options.py); requeue, so a preempted or
    timed-out job checkpoints and puts itself back (trainer/resilience/preemption.py)."""
    extra = {"requeue": True, **dict(sbatch_pair(a) for a in run.slurm.sbatch_arg)}
    return {
        **executor_parameters(run, extra),
        "srun_args": srun_args(run),
        "stderr_to_stdout": False,
        # the trap first: a user's setup may take a while; HOLD_USR2 after it: their modules may bring another env
        "setup": [*early_usr2_setup(shlex.quote(str(folder))), *run.slurm.setup, HOLD_USR2_SETUP],
    }


def make_executor(run: RunConfig, folder: Path, preview: bool = False):
    """submitit's SlurmExecutor for this run; `preview` renders the batch script on a machine without
    SLURM's commands (a dry run from a laptop), where submitit itself refuses to start."""
    import submitit

    class Executor(submitit.SlurmExecutor):
        def _num_tasks(self) -> int:  # submitit multiplies `nodes`: a range ("1-2") is text; count the most
            return run.num_processes

    class Preview(Executor):
        @classmethod
        def affinity(cls) -> int:  # submitit's check that `srun` exists
            return 1

    python = held(shlex.quote(sys.executable))  # submitit's command is `PYTHON -u -m submitit.core._submit ...`
    executor = (Preview if preview else Executor)(folder=folder / "%j", max_num_timeout=0, python=python)
    executor.update_parameters(**parameters(run, folder))
    return executor


def batch_script(executor) -> str:
    """The exact text submitit writes and hands to sbatch for this executor.

    submitit renders it in `_make_submission_file_text`, which depends only on the executor's
    folder and parameters; calling it shows the real script instead of a second template of ours.
    tests/test_slurm.py holds this equal to the file a real submission leaves behind.
    """
    return executor._make_submission_file_text(executor._submitit_command_str, "dry-run")


def follow_timeout_s(run: RunConfig) -> int:
    """SLURM ends the job at its time limit; allow for the queue and the start on top."""
    return run.slurm.time_min * 60 + 300


def submit(run: RunConfig, paths: RunPaths):
    """Submits the run's tasks; a refused new submission leaves no run directory."""
    from dali_launch.trainer.task import run_followed_task

    try:
        job = make_executor(run, paths.submitit).submit(run_followed_task, str(paths.root))
    except Exception as e:
        if not run.launch.resume:
            shutil.rmtree(paths.root, ignore_errors=True)
        raise UsageError(f"sbatch refused the job: {str(e).strip().splitlines()[-1]}") from None
    write_record(paths, job.job_id, paths.submitit)
    return job
