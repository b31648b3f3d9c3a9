"""SLURM's own checks, before anything is written: the SLURM flags as data the batch script can carry,
and what the cluster says (its commands answer, the partition has the nodes and GPUs asked for)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from dali_launch.launcher.backends.slurm_options import SET_BY_US
from dali_launch.launcher.backends.slurm_queue import QUERY_TIMEOUT_S
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.errors import UsageError

JOB_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")
SBATCH_KEY = re.compile(r"^[a-z][a-z0-9-]*$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def sbatch_pair(arg: str) -> tuple[str, str]:
    key, sep, value = arg.partition("=")
    if not sep or not SBATCH_KEY.match(key):
        raise UsageError(
            f"--sbatch-arg {arg!r} is not KEY=VALUE with a lowercase sbatch option name (e.g. mail-type=END)"
        )
    return key, value


def validate_slurm(run: RunConfig) -> None:
    """The SLURM flags, checked without asking SLURM; never changes anything."""
    s = run.slurm
    if not JOB_NAME.match(run.launch.name):
        raise UsageError(f"--name {run.launch.name!r} must be 1-64 letters, digits or . _ + -")
    for flag, value in (("--time-min", s.time_min), ("--mem-gb", s.mem_gb), ("--cpus-per-task", s.cpus_per_task)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value} must be at least 1")
    for arg in s.sbatch_arg:
        key, _ = sbatch_pair(arg)
        if key in SET_BY_US:
            raise UsageError(f"--sbatch-arg {arg!r} would replace the {key} dali-launch sets; {SET_BY_US[key]}")
    if any("\n" in line for line in s.setup):
        raise UsageError("a --setup line contains a newline; pass each shell line as its own --setup")
    _check_script_values(run)


def _check_script_values(run: RunConfig) -> None:
    """Every value submitit writes into the batch script must reach SLURM as the very same data.

    submitit shell-quotes each value (shlex.quote): `#SBATCH --key='v'` lines and the srun line.
    bash skips #SBATCH lines as comments; sbatch reads them with its own parser (Slurm 22.05
    src/sbatch/opt.c `_get_argument`), which honours '...' and "..." -- so spaces, quotes, `;` and
    `$(...)` stay data -- but ends the line at a newline (the rest of the value would run as shell)
    and takes a backslash as an escape (it vanishes). SLURM expands `%` in the log paths (%j, %t).
    Those cannot be quoted, so they are refused here. --setup lines are shell by design.
    """
    s = run.slurm
    root = str(Path(run.launch.run_root).absolute())  # becomes #SBATCH --output=ROOT/NAME-.../submitit/%j/...
    checks = [("--run-root", root, "\\%")]
    checks += [
        (flag, value, "\\")
        for flag, value in (
            ("--partition", s.partition),
            ("--account", s.account),
            ("--qos", s.qos),
            ("--constraint", s.constraint),
        )
        if value is not None
    ]
    checks += [("--sbatch-arg", arg, "\\") for arg in s.sbatch_arg]
    checks += [("--srun-arg", arg, "") for arg in s.srun_arg]  # the srun line is bash: only newlines matter
    checks += [("--container-image", s.container_image, "")] if s.container_image else []
    for flag, value, also in checks:
        if CONTROL.search(value):
            raise UsageError(
                f"{flag} {value!r} contains a newline or other control character, which the batch "
                f"script cannot carry as data; remove it"
            )
        for char in also:
            if char in value:
                why = (
                    "sbatch takes it as an escape in #SBATCH lines and drops it"
                    if char == "\\"
                    else "SLURM expands % in log file names (%j, %t)"
                )
                raise UsageError(f"{flag} {value!r} contains {char!r}: {why}; choose a value without it")


def check_cluster(run: RunConfig, local_hint: bool = True) -> None:
    """What SLURM itself says, asked before anything is written: its commands answer, the partition fits.
    `local_hint`: the fix may be --local (not for `dali-launch ci`, which is SLURM's only)."""
    here = ", or run here with --local" if local_hint else ""
    if shutil.which("sbatch") is None:
        if run.launch.dry_run:  # showing the script needs no cluster
            return
        raise UsageError(f"sbatch is not on PATH; submit from a machine with SLURM's commands (a login node){here}")
    if shutil.which("sinfo") is None:
        return
    args = ["sinfo", "-h", "-o", "%P|%D|%c|%G"] + (["-p", run.slurm.partition] if run.slurm.partition else [])
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return
    if proc.returncode != 0:
        if run.launch.dry_run:
            return
        last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1].removeprefix("sinfo: ")
        raise UsageError(f"SLURM does not answer (sinfo: {last}); check SLURM_CONF and that slurmctld runs{here}")
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 3]
    if run.slurm.partition is None:
        rows = [r for r in rows if r[0].endswith("*")] or rows
    if not rows:
        if run.slurm.partition:
            raise UsageError(f"--partition {run.slurm.partition} does not exist (sinfo); see `sinfo -s`")
        return
    partition, nodes = rows[0][0].rstrip("*"), sum(int(r[1]) for r in rows)
    if run.node_range[0] > nodes:  # a range's MAX may exceed it: SLURM gives what the partition has
        raise UsageError(f"--nodes {run.launch.nodes} is more than the {nodes} nodes of partition {partition}")
    if run.distributed.platform != "cpu":
        gpus = max((_gpu_count(r[3]) for r in rows), default=0)
        if gpus == 0:
            raise UsageError(
                f"partition {partition} has no GPUs (sinfo shows no gpu GRES); "
                f"choose a GPU --partition, or --platform cpu"
            )
        if run.launch.gpus_per_node > gpus:
            raise UsageError(
                f"--gpus-per-node {run.launch.gpus_per_node} is more than the {gpus} GPUs "
                f"a node of partition {partition} has"
            )


def _gpu_count(gres: str) -> int:
    return sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres))
