"""Running a run: check everything, write the run directory, start the tasks, report how it ended."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path

from dali_launch.launcher import datasets, plan, resume, runs
from dali_launch.launcher.config import RunConfig, counted, task_spec, validate
from dali_launch.launcher.options import Values
from dali_launch.trainer import entry_points, flavours
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths


def echo(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `dali-launch ... | head`: the reader left; the job goes on, and so do its logs
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def check_common(run: RunConfig) -> None:
    """The checks every launch mode runs first; they write nothing."""
    validate(run)
    flavours.check()  # before any device is taken or job queued; the task checks again
    entry_points.check("model", run.train.model, run.data.num_classes)
    entry_points.check("pipeline", run.data.pipeline)


def _prepare(run: RunConfig, backend: str, changed: bool = False):
    """All checks, then the run directory (new, or the one --resume continues); a dry run stops after
    printing the plan, before anything is written."""
    check_common(run)
    if not run.launch.resume:
        runs.check_root(run.launch.run_root)
    data_dir = data_of(run)
    if run.launch.dry_run:
        echo(plan.describe(run))
        echo(task_spec(run, run.launch.resume or "RUN_DIR", str(data_dir), backend).to_json())
        return None
    if run.launch.resume:
        return runs.reopen(run, data_dir, backend, changed)
    paths = runs.create(run, data_dir, backend)
    echo(f"run directory: {paths.root}")
    return paths


def data_of(run: RunConfig) -> Path:
    """The run's data, checked: the flags' (or the default) for a new run, the run's own when resuming."""
    if run.launch.resume:
        return datasets.check_reopened(Path(run.launch.resume))
    return datasets.resolve(run.data.data_dir, run.data.pipeline, run.data.num_classes)


def resume_run(values: Values, entry: str) -> int:
    """`--resume RUN`: the run continues in the mode it started in, from its own configuration."""
    how = resume.reopen(values, entry)
    changes = f"; changed: {how.describe()}" if how.changes else ""
    echo(f"resuming {how.run.launch.resume} (started by `{resume.COMMAND[how.backend]}`){changes}")
    if how.backend == "none":
        return train_here(how.run, bool(how.changes))
    return launch(how.run, bool(how.changes))


def train_here(run: RunConfig, changed: bool = False) -> int:
    """`dali-launch train`: the task runs in this very process."""
    if run.launch.nodes != 1 or run.tasks_per_node != 1 or run.launch.local:
        raise UsageError("`train` runs one process here; for several use "
                         "`dali-launch --local --nodes N --gpus-per-node G --processes P`")
    paths = _prepare(run, "none", changed)
    if paths is None:
        return 0
    from dali_launch.trainer.task import run_task

    with _also_to(paths.log(0)):  # `dali-launch logs RUN` reads a `train` run like a local one
        result = run_task(str(paths.root))
    summarize(result, paths)
    return 0


@contextlib.contextmanager
def _also_to(log: Path):
    """Python's stdout and stderr also go to `log` (appended: a resumed run keeps what came before)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    streams = sys.stdout, sys.stderr
    with log.open("a", encoding="utf-8") as file:
        sys.stdout, sys.stderr = (_Tee(stream, file) for stream in streams)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = streams


class _Tee:
    def __init__(self, stream, file):
        self.stream, self.file = stream, file

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.file.flush()
        self.stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding...: the terminal's
        return getattr(self.stream, name)


def launch(run: RunConfig, changed: bool = False) -> int:
    if run.launch.gpus_per_node is None:  # a job's devices are planned, never "whatever is there"
        run = dataclasses.replace(run, launch=dataclasses.replace(run.launch, gpus_per_node=1))
    if not run.launch.local:
        from dali_launch.launcher import slurm

        return slurm.launch(run, changed)
    paths = _prepare(run, "local", changed)
    if paths is None:
        return 0
    from dali_launch.launcher.local import LocalJob

    job = LocalJob(run, paths, echo=echo)
    job.start()
    outcome = job.wait(run.launch.local_timeout_s)
    if not outcome.ok:
        print(f"dali-launch: {outcome.message}", file=sys.stderr, flush=True)
        return outcome.code
    summarize(json.loads(paths.result.read_text()), paths)
    return 0


def summarize(result: dict, paths: RunPaths) -> None:
    final = result["final"]
    same = len(set(result["checksums"])) == 1
    replicas = len(result["checksums"])
    agree = "" if replicas == 1 else f"{replicas} replicas {'identical' if same else 'DIFFER'}; "
    echo(f"done: test accuracy {final['test_accuracy']:.4f} after {counted(final['epoch'] + 1, 'epoch')}; "
         f"{agree}metrics in {paths.metrics}")
