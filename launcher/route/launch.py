"""Running a run, one way for every mode: prepare -> a backend starts the tasks -> wait -> report.

dali-launch train            -> Here    (this process)
dali-launch --local ...      -> Local   (the job's processes on this machine)
dali-launch ...              -> Slurm   (a SLURM job through submitit)
dali-launch --resume RUN     -> whichever started RUN (its config.json says)
"""

from __future__ import annotations

import dataclasses
import json

from dali_launch.launcher import backends
from dali_launch.launcher.backends.base import Backend
from dali_launch.launcher.config import RunConfig, counted
from dali_launch.launcher.console import echo, error
from dali_launch.launcher.options import Values
from dali_launch.launcher.route import resume
from dali_launch.launcher.route.prepare import prepare
from dali_launch.trainer.run_dir import RunPaths


def new_run(run: RunConfig, here: bool = False) -> int:
    """A new run: `train` in this process, else a job (--local, or SLURM)."""
    if here:
        return launch(run, backends.create("train"))
    if run.launch.gpus_per_node is None:  # a job's devices are planned, never "whatever is there"
        run = dataclasses.replace(run, launch=dataclasses.replace(run.launch, gpus_per_node=1))
    return launch(run, backends.create("local" if run.launch.local else "slurm"))


def resume_run(values: Values, entry: str) -> int:
    """`--resume RUN`: the run continues in the mode it started in, from its own configuration."""
    how = resume.reopen(values, entry)
    changes = f"; changed: {how.describe()}" if how.changes else ""
    backend = backends.create(how.backend)
    echo(f"resuming {how.run.launch.resume} (started by `{backend.started_by}`){changes}")
    return launch(how.run, backend, changed=bool(how.changes))


def launch(run: RunConfig, backend: Backend, changed: bool = False) -> int:
    paths = prepare(run, backend, changed)
    if paths is None:
        return 0
    backend.start(run, paths)
    outcome = backend.wait()
    if not outcome.ok:
        if outcome.message:
            error(outcome.message)
        return outcome.code
    if outcome.report and paths.result.exists():  # not yet for a detached SLURM job
        summarize(json.loads(paths.result.read_text()), paths)
    return 0


def summarize(result: dict, paths: RunPaths) -> None:
    final = result["final"]
    same = len(set(result["checksums"])) == 1
    replicas = len(result["checksums"])
    agree = "" if replicas == 1 else f"{replicas} replicas {'identical' if same else 'DIFFER'}; "
    echo(
        f"done: test accuracy {final['test_accuracy']:.4f} after {counted(final['epoch'] + 1, 'epoch')}; "
        f"{agree}metrics in {paths.metrics}"
    )
