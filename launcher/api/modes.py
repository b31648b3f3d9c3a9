"""The Executor's modes: where a run goes, each as the CLI's own command runs it, and the one picked from where
the Executor runs when none is given, as submitit's AutoExecutor picks its cluster.

    Executor("here")    # `dali-launch train`: one process on this machine, all its GPUs
    Executor("local")   # `dali-launch --local`: the job's processes on this machine
    Executor("slurm")   # `dali-launch`: a SLURM job
    Executor()          # "slurm" where sbatch is on PATH (a login node, inside an allocation), else "here"

The pick: where sbatch is on PATH, a new SLURM job, as submitit's AutoExecutor submits one wherever SLURM's commands
are (inside an allocation too: `srun dali-launch task` is how a run uses the allocation itself, docs/slurm.md, and
a script's one process is not a task of such a step). Anywhere else "here", the one mode that needs no shape of the
job (submitit falls back to its own local executor the same way); "local" takes its processes, which only the caller
knows. The pick and why are kept on the Executor (`mode`, `picked`) and said in one line when it is made.
"""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Callable, Mapping

from dali_launch.launcher.run_config import NOT_SLURM, RUN_OPTIONS
from dali_launch.trainer.errors import UsageError

# Executor's mode -> the backend that runs it (config.json's name) and the CLI's flags it takes: `train`'s, or a job's.
# A mode says where a run goes, as submitit's executors are named: "here" is the mode of `dali-launch train`, whose
# command names it on the command line and in a run's records; Executor("train") is taken for it.
MODES = {"here": ("train", NOT_SLURM), "local": ("local", RUN_OPTIONS), "slurm": ("slurm", RUN_OPTIONS)}
SAME_MODE = {"train": "here"}  # another name a user may know a mode by -> the mode's


def check_mode(mode: str) -> str:
    """The mode `mode` names (its own name, or the CLI's for it), or a one-line UsageError."""
    if mode in SAME_MODE:
        return SAME_MODE[mode]
    if mode not in MODES:
        close = difflib.get_close_matches(str(mode), list(MODES), n=1, cutoff=0.5)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"Executor({mode!r}): no such mode; use one of {', '.join(map(repr, MODES))}{guess}")
    return mode


def pick(environ: Mapping[str, str] = os.environ, which: Callable[[str], str | None] = shutil.which) -> tuple[str, str]:
    """The mode for an Executor given none, and why, from the environment and the commands on PATH."""
    sbatch = which("sbatch")
    job = environ.get("SLURM_JOB_ID")
    if sbatch and job:
        return "slurm", f"inside SLURM job {job}'s allocation, sbatch at {sbatch}: a SLURM job of its own"
    if sbatch:
        return "slurm", f"sbatch is on PATH ({sbatch})"
    return "here", "sbatch is not on PATH: one process on this machine"


def backend_of(mode: str) -> str:
    """The backend that runs `mode`'s runs, by the name config.json records."""
    return MODES[mode][0]
