"""Running a run: check everything, write the run directory, start the tasks, report how it ended."""
from __future__ import annotations

import dataclasses
import json
import os
import sys

from dali_launch.launcher import datasets, plan, runs
from dali_launch.launcher.config import RunConfig, task_spec, validate
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
    entry_points.check("model", run.train.model)
    entry_points.check("pipeline", run.data.pipeline)


def _prepare(run: RunConfig, backend: str):
    """All checks, then the run directory; a dry run stops after printing the plan."""
    check_common(run)
    if run.launch.resume:
        paths = runs.reopen(run, backend)
        echo(f"resuming run directory: {paths.root}")
        return paths
    runs.check_root(run.launch.run_root)
    data_dir = datasets.resolve(run.data.data_dir, run.data.pipeline, run.data.num_classes)
    if run.launch.dry_run:
        echo(plan.describe(run))
        echo(task_spec(run, "RUN_DIR", str(data_dir), backend).to_json())
        return None
    paths = runs.create(run, data_dir, backend)
    echo(f"run directory: {paths.root}")
    return paths


def train_here(run: RunConfig) -> int:
    """`dali-launch train`: the task runs in this very process."""
    if run.launch.nodes != 1 or run.tasks_per_node != 1 or run.launch.local:
        raise UsageError("`train` runs one process here; for several use "
                         "`dali-launch --local --nodes N --gpus-per-node G --processes P`")
    paths = _prepare(run, "none")
    if paths is None:
        return 0
    from dali_launch.trainer.task import run_task

    summarize(run_task(str(paths.root)), paths)
    return 0


def launch(run: RunConfig) -> int:
    if run.launch.gpus_per_node is None:  # a job's devices are planned, never "whatever is there"
        run = dataclasses.replace(run, launch=dataclasses.replace(run.launch, gpus_per_node=1))
    if not run.launch.local:
        from dali_launch.launcher import slurm

        return slurm.launch(run)
    paths = _prepare(run, "local")
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
    echo(f"done: test accuracy {final['test_accuracy']:.4f} after {final['epoch'] + 1} epochs; "
         f"{len(result['checksums'])} replicas {'identical' if same else 'DIFFER'}; metrics in {paths.metrics}")
