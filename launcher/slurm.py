"""SLURM through submitit: the only module that knows sbatch, srun and squeue.

Each task runs `dali_launch.trainer.task.run_task(RUN_DIR)`; submitit pickles that reference, so
the trainer never sees a launcher object.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from dali_launch.launcher import plan, runs
from dali_launch.launcher.config import RunConfig
from dali_launch.launcher.jobs import check_common, data_of
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import write_atomic

JOB_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")
SBATCH_KEY = re.compile(r"^[a-z][a-z0-9-]*$")
QUERY_TIMEOUT_S = 30  # every squeue/sinfo/scancel call is bounded
# sbatch options that dali-launch (or submitit, for its logs and requeue signal) writes itself; an
# --sbatch-arg would silently replace them. (mem and exclusive stay open: they take values our flags cannot.)
SET_BY_US = {
    **{key: f"use {flag}" for key, flag in (
        ("job-name", "--name"), ("nodes", "--nodes"), ("ntasks-per-node", "--tasks-per-node"),
        ("gpus-per-node", "--gpus-per-node"), ("time", "--time-min"), ("partition", "--partition"),
        ("account", "--account"), ("qos", "--qos"), ("constraint", "--constraint"),
        ("cpus-per-task", "--cpus-per-task"))},
    **{key: "dali-launch needs its own value to find the logs and to requeue the job"
       for key in ("output", "error", "open-mode", "signal", "requeue")},
}
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def executor_parameters(run: RunConfig) -> dict:
    """submitit's SlurmExecutor parameters for this run (sbatch names, submitit's spelling)."""
    s, launch = run.slurm, run.launch
    params = {"job_name": launch.name, "nodes": launch.nodes, "ntasks_per_node": run.tasks_per_node,
              "time": s.time_min, "partition": s.partition, "account": s.account, "qos": s.qos,
              "constraint": s.constraint, "cpus_per_task": s.cpus_per_task,
              "mem": f"{s.mem_gb}GB" if s.mem_gb else None, "exclusive": True if s.exclusive else None,
              "setup": list(s.setup) or None, "stderr_to_stdout": False}
    if run.distributed.platform != "cpu":  # CPU devices stand in for GPUs: ask SLURM for none
        params["gpus_per_node"] = launch.gpus_per_node
    # A rank that dies takes its step down at once; the others would wait in a collective.
    srun = ["--kill-on-bad-exit=1", *s.srun_arg] + (["--container-image", s.container_image] if s.container_image else [])
    params["srun_args"] = srun
    # requeue: a preempted or timed-out job checkpoints and puts itself back (trainer/preemption.py)
    params["additional_parameters"] = {"requeue": True, **dict(_sbatch_pair(a) for a in s.sbatch_arg)}
    return {k: v for k, v in params.items() if v is not None}


def _sbatch_pair(arg: str) -> tuple[str, str]:
    key, sep, value = arg.partition("=")
    if not sep or not SBATCH_KEY.match(key):
        raise UsageError(f"--sbatch-arg {arg!r} is not KEY=VALUE with a lowercase sbatch option name "
                         f"(e.g. mail-type=END)")
    return key, value


def make_executor(run: RunConfig, folder: Path, preview: bool = False):
    """submitit's SlurmExecutor for this run; `preview` renders the batch script on a machine without
    SLURM's commands (a dry run from a laptop), where submitit itself refuses to start."""
    import submitit

    class Preview(submitit.SlurmExecutor):
        @classmethod
        def affinity(cls) -> int:  # submitit's check that `srun` exists
            return 1

    executor = (Preview if preview else submitit.SlurmExecutor)(folder=folder / "%j", max_num_timeout=0)
    executor.update_parameters(**executor_parameters(run))
    return executor


def batch_script(executor) -> str:
    """The exact text submitit writes and hands to sbatch for this executor.

    submitit renders it in `_make_submission_file_text`, which depends only on the executor's
    folder and parameters; calling it shows the real script instead of a second template of ours.
    tests/test_slurm.py holds this equal to the file a real submission leaves behind.
    """
    return executor._make_submission_file_text(executor._submitit_command_str, "dry-run")


def validate_slurm(run: RunConfig) -> None:
    """The SLURM flags, checked without asking SLURM; never changes anything."""
    s = run.slurm
    if not JOB_NAME.match(run.launch.name):
        raise UsageError(f"--name {run.launch.name!r} must be 1-64 letters, digits or . _ + -")
    for flag, value in (("--time-min", s.time_min), ("--mem-gb", s.mem_gb), ("--cpus-per-task", s.cpus_per_task)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value} must be at least 1")
    for arg in s.sbatch_arg:
        key, _ = _sbatch_pair(arg)
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
    checks += [(flag, value, "\\") for flag, value in (
        ("--partition", s.partition), ("--account", s.account), ("--qos", s.qos), ("--constraint", s.constraint))
        if value is not None]
    checks += [("--sbatch-arg", arg, "\\") for arg in s.sbatch_arg]
    checks += [("--srun-arg", arg, "") for arg in s.srun_arg]  # the srun line is bash: only newlines matter
    checks += [("--container-image", s.container_image, "")] if s.container_image else []
    for flag, value, also in checks:
        if CONTROL.search(value):
            raise UsageError(f"{flag} {value!r} contains a newline or other control character, which the batch "
                             f"script cannot carry as data; remove it")
        for char in also:
            if char in value:
                why = ("sbatch takes it as an escape in #SBATCH lines and drops it" if char == "\\"
                       else "SLURM expands % in log file names (%j, %t)")
                raise UsageError(f"{flag} {value!r} contains {char!r}: {why}; choose a value without it")


def check_cluster(run: RunConfig) -> None:
    """What SLURM itself says, asked before anything is written: its commands answer, the partition fits."""
    if shutil.which("sbatch") is None:
        if run.launch.dry_run:  # showing the script needs no cluster
            return
        raise UsageError("sbatch is not on PATH; submit from a machine with SLURM's commands (a login node), "
                         "or run here with --local")
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
        raise UsageError(f"SLURM does not answer (sinfo: {last}); check SLURM_CONF and that slurmctld runs, "
                         f"or run here with --local")
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 3]
    if run.slurm.partition is None:
        rows = [r for r in rows if r[0].endswith("*")] or rows
    if not rows:
        if run.slurm.partition:
            raise UsageError(f"--partition {run.slurm.partition} does not exist (sinfo); see `sinfo -s`")
        return
    partition, nodes = rows[0][0].rstrip("*"), sum(int(r[1]) for r in rows)
    if run.launch.nodes > nodes:
        raise UsageError(f"--nodes {run.launch.nodes} is more than the {nodes} nodes of partition {partition}")
    if run.distributed.platform != "cpu":
        gpus = max((_gpu_count(r[3]) for r in rows), default=0)
        if gpus == 0:
            raise UsageError(f"partition {partition} has no GPUs (sinfo shows no gpu GRES); "
                             f"choose a GPU --partition, or --platform cpu")
        if run.launch.gpus_per_node > gpus:
            raise UsageError(f"--gpus-per-node {run.launch.gpus_per_node} is more than the {gpus} GPUs "
                             f"a node of partition {partition} has")


def check_all(run: RunConfig) -> Path:
    """Every check a submission needs, cheapest first; writes nothing. Returns the data folder."""
    check_common(run)
    validate_slurm(run)
    check_cluster(run)
    if not run.launch.resume:
        runs.check_root(run.launch.run_root)
    return data_of(run)


def _gpu_count(gres: str) -> int:
    return sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres))


def launch(run: RunConfig, changed: bool = False) -> int:
    data_dir = check_all(run)
    if run.launch.dry_run:
        print(plan.describe(run))
        folder = Path(run.launch.resume or Path(run.launch.run_root).absolute() / "RUN_DIR") / "submitit"
        print(batch_script(make_executor(run, folder, preview=True)))
        return 0
    job, paths = submit(run, data_dir, changed)
    print(f"submitted job {job.job_id}; run directory: {paths.root}", flush=True)
    if run.slurm.detach:
        return 0
    from dali_launch.launcher.follow import follow

    return follow(job, paths, timeout_s=follow_timeout_s(run))


def follow_timeout_s(run: RunConfig) -> int:
    """SLURM ends the job at its time limit; allow for the queue and the start on top."""
    return run.slurm.time_min * 60 + 300


def submit(run: RunConfig, data_dir: Path, changed: bool = False):
    """Writes the run directory (or reopens it, --resume) and submits its tasks; a refused new
    submission leaves no directory."""
    paths = runs.reopen(run, data_dir, "slurm", changed) if run.launch.resume else runs.create(run, data_dir, "slurm")
    from dali_launch.trainer.task import run_task

    try:
        job = make_executor(run, paths.submitit).submit(run_task, str(paths.root))
    except Exception as e:
        if not run.launch.resume:
            shutil.rmtree(paths.root, ignore_errors=True)
        raise UsageError(f"sbatch refused the job: {str(e).strip().splitlines()[-1]}") from None
    write_atomic(paths.root / "job.json", json.dumps({"job_id": job.job_id, "submitit": str(paths.submitit)}))
    return job, paths
