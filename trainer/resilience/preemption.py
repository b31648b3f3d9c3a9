"""What a signal means to a task: stop at an agreed step, write a checkpoint, then requeue or stop.

The one place that decides it; nothing else in the trainer installs a handler:

    SIGUSR2  SLURM's warning before a time limit or preemption (`#SBATCH --signal`, set by submitit): requeue
    SIGTERM  scancel, SLURM's end of a job, the local launcher passing on Ctrl-C or its own SIGTERM: stop
    SIGINT   Ctrl-C of `dali-launch train`: stop

A handler only raises a flag; at the loop's next sync point, which every process reaches at the
same device call, the processes agree (the strongest request anywhere wins: stop over requeue),
write one checkpoint, and then process 0 asks SLURM to requeue the job (which runs the same task
and resumes from that checkpoint), or every process records that it stopped and exits with
128 + the signal's number, like a process the signal ended. A second stop signal exits at once.

JAX's preemption service would catch SIGTERM itself ("SIGTERM caught"; topology.initialize turns
it off) and submitit installs handlers for USR2 (an immediate requeue, before our checkpoint) and
TERM (ignored): `listen` replaces them, after jax.distributed.initialize. USR2 is caught from the
task's first line (`catch_early`): SLURM's warning may come during start-up (a time limit inside the
warning's lead, --time-min 1 under USR2@90, warns at slurmctld's first check), and submitit's handler
then raised inside whatever ran ("Unable to initialize backend 'cpu': Job not requeued because:
timed-out too many times", from JAX's backend start: a CI run); caught early, it waits for the first
sync point like any other. One that comes even earlier, before the interpreter runs this line, waits
too: a SLURM step's tasks start with USR2 blocked, and `catch_early` unblocks it. One that reached the
job's batch shell before the step existed (`scancel --full` or `--batch`) was noted there in the file
EARLY_USR2 names (launcher/backends/slurm_options.py), which `catch_early` reads: it counts as if it had
come to this task. A plain `scancel --signal=USR2` sent before the step exists reaches no process: SLURM
signals a job's steps alone, and drops it.

A second stop signal records this rank's ending (stopped, without a checkpoint) before it exits: the run
was interrupted as asked, which `status` says (not "failed": the ending was all it had to say why).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.resilience import ending, scheduler
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import Topology

REQUEUE, STOP = 1, 2
MEANING = {signal.SIGUSR2: REQUEUE, signal.SIGTERM: STOP, signal.SIGINT: STOP}
REQUEUE_WAIT_S = 300  # SLURM kills a requeued job's tasks; if it never does, give up and fail
EARLY_USR2 = "DALI_LAUNCH_EARLY_USR2"  # a file the batch shell writes when a USR2 reaches it (see above)
_asked = {"what": 0, "signum": 0, "early": False}  # this process's strongest request so far (signals are per process)
_task: dict = {}  # the topology and run directory of the task that listens


def catch_early() -> None:
    """At a task's first line: SLURM's warning (USR2) only raises the flag, whenever it comes (the others keep
    their handlers until `listen`: JAX's initialisation would replace a SIGTERM handler set before it)."""
    _asked.update(what=0, signum=0, early=False)  # a process may run several tasks (benchmarks)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR2, _on_signal)
        # A SLURM step starts its tasks with USR2 blocked (launcher/backends/slurm_options.py, HOLD_USR2): one
        # that came before this line waits, pending, and reaches the handler now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
    noted = os.environ.get(EARLY_USR2)
    if noted and os.path.exists(noted):  # this start's batch shell caught one before the step existed
        _asked.update(what=REQUEUE, signum=signal.SIGUSR2, early=True)


def listen(topology: Topology, paths: RunPaths) -> None:
    """From now on the signals above mean what the table says (only the main thread may install)."""
    _task.update(topology=topology, paths=paths)
    if threading.current_thread() is threading.main_thread():
        for signum in MEANING:
            signal.signal(signum, _on_signal)


def _on_signal(signum, frame) -> None:
    if MEANING[signum] == STOP and _asked["what"] == STOP:
        name = signal.Signals(signum).name
        print(f"dali-launch: {name} again; exiting without a checkpoint", file=sys.stderr, flush=True)
        if _task:  # listening: the run directory is known (before, Python's own KeyboardInterrupt ends the task)
            rank = _task["topology"].process_id
            line = f"rank {rank} was stopped by a second {name}, before it checkpointed"
            ending.record(_task["paths"], rank, ending.STOPPED, line)
        os._exit(128 + signum)
    if MEANING[signum] >= _asked["what"]:
        _asked.update(what=MEANING[signum], signum=signum)


class Preemption:
    def __init__(self, processes: int = 1):
        self.processes = processes  # the job's (Facts.process_count): every one of them agrees

    def agreed(self, *also: bool) -> list[int]:
        """[strongest request anywhere, its signal, any process's `also[i]`, ...], alike on every process.

        A collective (all processes call it at the same point); other per-process decisions, like a
        clock saying a checkpoint is due, ride along so every process acts alike.
        """
        local = np.array([_asked["what"], _asked["signum"], *also], np.int32)
        if self.processes == 1:
            return [int(v) for v in local]
        from jax.experimental import multihost_utils  # here: a task imports this module before JAX's env is set

        flags = np.asarray(multihost_utils.process_allgather(local)).reshape(-1, local.size)
        return [int(v) for v in flags.max(axis=0)]


def end(what: int, signum: int, step: int, spec: TaskSpec) -> None:
    """After the agreed checkpoint at `step`: requeue (SLURM's warning, within --max-requeues) or stop.
    Never returns."""
    topology, max_requeues = _task["topology"], spec.resilience.max_requeues
    job_id = topology.job_id
    if what == REQUEUE and scheduler.may_requeue(topology, max_requeues):
        _requeue(topology, max_requeues, spec, step)
    name = signal.Signals(signum).name
    why = (
        ""
        if what == STOP
        else f" ({'not a SLURM job' if job_id is None else f'--max-requeues {max_requeues} reached'})"
    )
    line = (
        f"{'preempted' if what == REQUEUE else f'stopped by {name}'}; checkpoint written at step {step}{why}; "
        f"resume with {spec.how_to_resume()}"
    )
    ending.record(_task["paths"], topology.process_id, ending.STOPPED, line, step=step, signal=name)
    if topology.process_id == 0 and not _task["paths"].cancel.exists():  # a cancel's launcher says it, once
        print(f"dali-launch: {line}", file=sys.stderr, flush=True)
    sys.exit(128 + signum)


def _requeue(topology: Topology, max_requeues: int, spec: TaskSpec, step: int) -> None:
    job_id = topology.job_id
    if topology.process_id == 0:
        before = " (sent before the tasks started; the batch shell kept it)" if _asked["early"] else ""
        scheduler.requeue(topology, _task["paths"], f"SIGUSR2{before}, checkpoint at step {step}")
        print(
            f"preempted: checkpoint written, job {job_id} requeued ({topology.restart_count + 1}/{max_requeues})",
            flush=True,
        )
    time.sleep(REQUEUE_WAIT_S)  # SLURM ends this incarnation; returning would report success
    sys.exit(
        f"dali-launch: job {job_id} was not requeued within {REQUEUE_WAIT_S} s; resume with {spec.how_to_resume()}"
    )
