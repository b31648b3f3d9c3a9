"""`dali-launch status / logs / cancel`: a run, found by its run directory, its name or its SLURM job id.

Every mode is covered through the run's job handle (backends/job.py): a SLURM job (job.json, written at
submission) is asked of the queue and read from submitit's logs; a local or `train` run is read from its
run directory alone (its ranks' logs and reports; live while its launcher or process 0 holds its lock).
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from dali_launch.trainer.errors import UsageError

RunRoot = Annotated[str, typer.Option(help="Folder holding the run directories.")]
JobArg = Annotated[
    str,
    typer.Argument(
        help="A run directory (any mode), a run's name as `dali-launch runs` lists it, the --name it was given "
        "(its newest run), or a SLURM job id."
    ),
]


def status(job: JobArg, run_root: RunRoot = "runs"):
    """Where a run stands: a SLURM job (squeue, else sacct, else its files), or a local or `train` run."""
    typer.echo(status_line(find(job, run_root)))


def logs(
    job: JobArg,
    run_root: RunRoot = "runs",
    rank: Annotated[int | None, typer.Option(help="Only this rank's log, unprefixed.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    follow_timeout_s: Annotated[int, typer.Option(help="Stop following after this long.")] = 86400,
):
    """A run's logs: every rank, prefixed, or one rank; --follow until it ends."""
    print_logs(find(job, run_root), rank, follow_timeout_s if follow else None, typer.echo)


def cancel(job: JobArg, run_root: RunRoot = "runs"):
    """Stop a run: scancel a SLURM job; SIGTERM a local run's ranks (they checkpoint, then stop)."""
    raise typer.Exit(find(job, run_root).cancel(typer.echo))


def find(job: str, run_root: str):
    """The job handle of JOB: a run directory, a run's name or a SLURM job id (registry.find_run)."""
    from dali_launch.launcher.backends import registry

    return registry.attach(registry.find_run(job, run_root))


def status_line(job) -> str:
    """One line: its state (what a running run does, what requeued it), the last epoch's headline (and the best
    epoch's, by its direction, where that is another), where it would resume, where it lives."""
    from dali_launch.launcher.backends.job import RunState, doing, requeued, resume_hint, why_ended
    from dali_launch.trainer.run_dir import best, headline, read_jsonl, take_notes

    epochs = [m for m in read_jsonl(job.paths.metrics) if headline(m)[1] is not None]
    last, top = (epochs[-1] if epochs else None), best(epochs)
    metric, value = headline(last or {})
    progress = f"; epoch {last.get('epoch')} test {metric} {value:.4f}" if last else ""
    if top is not None and top is not last:
        progress += f" (best {headline(top)[1]:.4f} at epoch {top.get('epoch')})"
    state = job.state()
    hint = "" if state.live or state in (RunState.FINISHED, RunState.NOT_STARTED) else resume_hint(job.paths)
    why = doing(job.paths) if state is RunState.RUNNING else why_ended(job.paths, state)
    again = requeued(job.paths)
    damaged = "".join(f"; {note}" for note in take_notes())  # said here, not on stderr: status is this line
    return (
        f"{job.name}: {state}{f' ({why})' if why else ''}{f'; {again}' if again else ''}{progress}"
        f"{f'; {hint}' if hint else ''}; run directory {job.paths.root}{damaged}"
    )


def print_logs(job, rank: int | None, follow_s: float | None, echo=print) -> None:
    """Prints rank logs (all ranks prefixed, or one); with follow, until the run ends (or follow_s passes)."""
    from dali_launch.launcher.backends.follow import LogTail
    from dali_launch.trainer.observe.library_output import untagged  # a SLURM task's library lines: shown here

    ranks = [rank] if rank is not None else list(range(job.num_tasks))
    if any(r < 0 or r >= job.num_tasks for r in ranks):
        raise UsageError(f"--rank {rank} is out of range; {job.name} has ranks 0..{job.num_tasks - 1}")
    tails = [(r, LogTail(path)) for r in ranks for path in job.logs(r)]
    deadline = time.monotonic() + (follow_s or 0)
    while True:
        for r, tail in tails:
            for line in map(untagged, tail.lines()):
                echo(line if rank is not None else f"[rank {r}] {line}")
        if follow_s is None or not job.state().live or time.monotonic() > deadline:
            break
        time.sleep(1)
    for r, tail in tails:  # the last line may lack its newline
        if tail.partial:
            text = untagged(tail.partial.decode(errors="replace"))
            echo(text if rank is not None else f"[rank {r}] {text}")
