"""`dali-launch slurm template [flags]`: an sbatch script of the user's own, ready to run and to adapt.

Sites hand out their own batch scripts (account, QoS, container, module loads); this one shows
what dali-launch needs in them: the job's shape in #SBATCH lines, a warning signal and requeue for
preemption, and `srun dali-launch task FLAGS` (allocation.py). SLURM flags become #SBATCH lines through the
one table of slurm_options.py (and --setup lines, shell run before the step); the other flags given go to `task`.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from dali_launch.launcher.backends.slurm_checks import sbatch_pair
from dali_launch.launcher.backends.slurm_options import (
    HOLD_USR2_SETUP,
    early_usr2_setup,
    held,
    sbatch_values,
    srun_args,
)
from dali_launch.launcher.options import Values
from dali_launch.launcher.run_config import RunConfig, SlurmConfig, marked
from dali_launch.trainer.errors import UsageError

SIGNAL_S = 90  # warning before the time limit: room for a checkpoint of a large model on a slow filesystem
# Not for `task`: the allocation gives the job's shape, and these are about submitting or other modes.
NOT_FOR_TASK = {f for f in SlurmConfig.__dataclass_fields__} | {
    "nodes",
    "tasks_per_node",
    "local",
    "local_timeout_s",
    "dry_run",
    "resume",
}


def template(run: RunConfig, values: Values) -> str:
    launch, s = run.launch, run.slurm
    if run.nodes_vary:  # a requeue on another count would be another step shape, which the reopened run refuses
        raise UsageError(
            f"--nodes {launch.nodes} is a range, but the template's srun step reopens its run only with the shape "
            f"it started with; give one count, e.g. --nodes {run.node_range[0]}, or submit the range with "
            f"`dali-launch --nodes {launch.nodes}`"
        )
    sbatch = {**sbatch_values(run), **dict(sbatch_pair(a) for a in s.sbatch_arg)}
    lines = [
        "#!/bin/bash",
        "# dali-launch in your own batch script: adapt it (account, modules, container), then `sbatch` it.",
        "# Every task of the srun step below is one process of the run; the run directory is",
        "# RUN_ROOT/NAME-JOBID.STEP, made once by task 0. Inside `salloc`, run the srun line alone.",
    ]
    lines += [
        f"#SBATCH --{key}" if value is True else f"#SBATCH --{key}={shlex.quote(str(value))}"
        for key, value in sbatch.items()
    ]
    lines += [
        f"# SIGUSR2 {SIGNAL_S} s before the time limit: the tasks checkpoint and requeue the job, which reopens",
        "# its run directory and resumes. Without --signal, SLURM's SIGTERM at the limit still checkpoints, but",
        "# the job ends; continue it with `dali-launch --resume RUN_DIR`.",
        f"#SBATCH --signal=USR2@{SIGNAL_S}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        "",
    ]
    lines += [
        "# A SIGUSR2 that reaches this shell (scancel --full or --batch) goes to the step's tasks: noted for those",
        "# not started yet, passed on through srun to the others. A plain scancel --signal=USR2 reaches steps alone.",
        *early_usr2_setup(_run_root(run, values)),
        "",
    ]
    lines += [*s.setup, *([""] if s.setup else [])]
    lines += [
        "# The tasks start with SIGUSR2 blocked where env can (coreutils 8.31+): one that comes before their",
        "# handler exists waits for it, instead of killing the task.",
        HOLD_USR2_SETUP,
    ]
    srun = ["srun", *srun_args(run)]
    task = [held(_dali_launch()), "task", *map(shlex.quote, task_flags(values))]
    lines.append(" ".join([*map(shlex.quote, srun), *task]))
    return "\n".join(lines) + "\n"


def task_flags(values: Values) -> list[str]:
    """The given flags that `task` takes, as command-line words (paths made absolute)."""
    words: list[str] = []
    paths = marked("path")  # the script may run from another folder than this command
    for name in sorted(values.given - NOT_FOR_TASK):
        value, flag = values[name], "--" + name.replace("_", "-")
        if name in paths and value is not None:
            value = str(Path(value).absolute())
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, list):
            words += [w for v in value for w in (flag, str(v))]
        elif value is not None:
            words += [flag, str(value)]
    return words


def _run_root(run: RunConfig, values: Values) -> str:
    """The tasks' run root as shell text: as `task` gets it (absolute, given), else its default under the job's
    folder (SLURM starts the tasks where sbatch was called, as it does this script)."""
    if "run_root" in values.given:
        return shlex.quote(str(Path(run.launch.run_root).absolute()))
    return f'"$PWD"/{shlex.quote(run.launch.run_root)}'


def _dali_launch() -> str:
    """This installation's dali-launch, so the script runs as printed; a site's module or venv may replace it."""
    script = Path(sys.executable).parent / "dali-launch"
    return shlex.quote(str(script)) if script.exists() else f"{shlex.quote(sys.executable)} -m dali_launch.launcher.cli"
