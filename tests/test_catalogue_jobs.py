"""The catalogue of bad inputs: a job's layout (--local) and the SLURM values of a submission, first those
refused before SLURM is asked anything, then those only SLURM itself can answer (the local cluster).
catalogue.py says how an entry runs."""

from __future__ import annotations

import pytest
from catalogue import SUBMIT, check_entry

BS = "\\"

NOT_NODES = "is not a node count or a MIN-MAX range of counts; write e.g. 2 or 1-2"
JOB = ["--local", "--data-dir", "{data}", "--run-root", "{root}"]
LAYOUT = [
    pytest.param(["--nodes", "0"], f"--nodes 0 {NOT_NODES}", id="nodes-zero"),
    pytest.param(
        ["--nodes", "1-2", "--sample-order", "global", "--global-batch-size", "100"],
        "--nodes 1-2 is a range for SLURM to pick from, but --local runs a fixed count; give one count, e.g. --nodes 1",
        id="node-range-local",
    ),
    pytest.param(["--gpus-per-node", "0"], "--gpus-per-node 0 must be at least 1", id="gpus-zero"),
    pytest.param(
        ["--gpus-per-node", "2", "--tasks-per-node", "0"], "--tasks-per-node 0 must be at least 1", id="tasks-zero"
    ),
    pytest.param(
        ["--gpus-per-node", "4", "--processes", "3"],
        "--tasks-per-node 3 does not divide --gpus-per-node 4; use 1 (one task per node) or 4 (one task per GPU)",
        id="tasks-not-dividing-gpus",
    ),
    pytest.param(
        ["--local", "--gpus-per-node", "1", "--processes", "2"],
        "--tasks-per-node 2 does not divide --gpus-per-node 1; use 1 (one task per node) on its one GPU, or "
        "--gpus-per-node 2 (one task per GPU)",
        id="tasks-beside-one-gpu",
    ),
    pytest.param(
        ["--nodes", "2", "--gpus-per-node", "2", "--global-batch-size", "50"],
        "--global-batch-size 50 is not divisible by 4 devices (2 nodes × 2 GPUs); use a multiple of 4",
        id="global-batch-not-dividing",
    ),
    pytest.param(["--local-timeout-s", "0"], "--local-timeout-s 0 must be at least 1", id="local-timeout-zero"),
]

GLOBAL = ["--sample-order", "global"]
NODE_RANGE = [  # --nodes MIN-MAX: SLURM picks the count at each start
    pytest.param(["--nodes", "1-"], f"--nodes 1- {NOT_NODES}", id="node-range-no-max"),
    pytest.param(["--nodes", "2-1"], f"--nodes 2-1 {NOT_NODES}", id="node-range-backwards"),
    pytest.param(["--nodes", "x-2"], f"--nodes x-2 {NOT_NODES}", id="node-range-not-a-number"),
    pytest.param(
        ["--nodes", "1-3", "--global-batch-size", "100"],
        "--global-batch-size 100 cannot be split over 3 of the 1-3 devices (1-3 nodes × 1 GPU) SLURM may give; "
        "use a multiple of 6 (divisible by 1, 2, 3 devices), or narrow --nodes",
        id="node-range-global-batch-not-dividing",
    ),
    pytest.param(
        ["--nodes", "1-2", *GLOBAL],  # either order
        "--nodes 1-2 with --elastic-batch keep needs a --global-batch-size, a multiple of 2 so that 1 or 2 devices "
        "split it evenly; give one, or add --elastic-batch rescale (keeps the per-device --batch-size)",
        id="node-range-keep-without-global-batch",
    ),
]

SCRIPT = [  # refused before SLURM is asked anything: the values cannot reach sbatch as they are
    pytest.param(
        ["--name", "a b;$(touch x)"],
        "--name 'a b;$(touch x)' must be 1-64 letters, digits or . _ + -",
        id="name-hostile",
    ),
    pytest.param(["--time-min", "0"], "--time-min 0 must be at least 1", id="time-min-zero"),
    pytest.param(["--mem-gb", "0"], "--mem-gb 0 must be at least 1", id="mem-gb-zero"),
    pytest.param(["--cpus-per-task", "0"], "--cpus-per-task 0 must be at least 1", id="cpus-per-task-zero"),
    pytest.param(
        ["--sbatch-arg", "mail-type"],
        "--sbatch-arg 'mail-type' is not KEY=VALUE with a lowercase sbatch option name (e.g. mail-type=END)",
        id="sbatch-arg-not-key-value",
    ),
    pytest.param(
        ["--sbatch-arg", "output=/tmp/x.log"],
        "--sbatch-arg 'output=/tmp/x.log' would replace the output "
        "dali-launch sets; dali-launch needs its own value to find the logs and to requeue the job",
        id="sbatch-arg-output",
    ),
    pytest.param(
        ["--sbatch-arg", "partition=gpu"],
        "--sbatch-arg 'partition=gpu' would replace the partition dali-launch sets; use --partition",
        id="sbatch-arg-partition",
    ),
    pytest.param(
        ["--sbatch-arg", "comment=a\ntouch /tmp/x"],
        "--sbatch-arg 'comment=a\\ntouch /tmp/x' contains a "
        "newline or other control character, which the batch script cannot carry as data; remove it",
        id="sbatch-arg-newline",
    ),
    pytest.param(
        ["--setup", "module load cuda\nrm -rf ~"],
        "a --setup line contains a newline; pass each shell line as its own --setup",
        id="setup-newline",
    ),
    pytest.param(
        ["--run-root", "{tmp}/a\nb"],
        "--run-root {newline_root} contains a newline or other control "
        "character, which the batch script cannot carry as data; remove it",
        id="run-root-newline",
    ),
    pytest.param(
        ["--run-root", "{tmp}/runs-%j"],
        "--run-root '{tmp}/runs-%j' contains '%': SLURM expands % in log "
        "file names (%j, %t); choose a value without it",
        id="run-root-percent",
    ),
    pytest.param(
        ["--partition", f"debug{BS}x"],
        f"--partition 'debug{BS * 2}x' contains '{BS * 2}': sbatch takes it "
        f"as an escape in #SBATCH lines and drops it; choose a value without it",
        id="partition-backslash",
    ),
    pytest.param(
        ["--srun-arg", "--comment=a\nb"],
        "--srun-arg '--comment=a\\nb' contains a newline or other control "
        "character, which the batch script cannot carry as data; remove it",
        id="srun-arg-newline",
    ),
]


@pytest.mark.parametrize("args, message", LAYOUT)
def test_layout(capsys, place, nothing_starts, args, message):
    check_entry(capsys, place, [*JOB, *args], message)


@pytest.mark.parametrize("args, message", NODE_RANGE)
def test_node_range(capsys, place, nothing_starts, args, message):
    check_entry(capsys, place, [*SUBMIT[2:], *args], message)  # SUBMIT without its --nodes 1


@pytest.mark.parametrize("args, message", SCRIPT)
def test_slurm_values(capsys, place, nothing_starts, args, message):
    check_entry(capsys, place, [*SUBMIT, *args], message)


def test_no_sbatch_here(capsys, place, nothing_starts, monkeypatch):
    folder, _ = place
    (folder / "bin").mkdir()
    monkeypatch.setenv("PATH", str(folder / "bin"))
    message = (
        "sbatch is not on PATH; submit from a machine with SLURM's commands (a login node), or run here with --local"
    )
    check_entry(capsys, place, SUBMIT, message)


@pytest.mark.slurm
@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(
            ["--partition", "nope"], "--partition nope does not exist (sinfo); see `sinfo -s`", id="partition-unknown"
        ),
        pytest.param(["--nodes", "3"], "--nodes 3 is more than the 2 nodes of partition debug", id="nodes-too-many"),
        pytest.param(
            ["--platform", "gpu", "--gpus-per-node", "1"],
            "partition debug has no GPUs (sinfo shows no gpu GRES); choose a GPU --partition, or --platform cpu",
            id="gpus-on-cpu-partition",
        ),
    ],
)
def test_slurm_says_no(capsys, place, nothing_starts, monkeypatch, slurm_env, args, message):
    """Entries only SLURM can answer, asked of the local cluster (sinfo) before anything is written."""
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    check_entry(capsys, place, [*SUBMIT, *args], message)


@pytest.mark.slurm
def test_slurm_broken(capsys, place, nothing_starts, monkeypatch, slurm_env):
    """SLURM's commands are here but its configuration is broken: sinfo's own complaint, before anything."""
    folder, _ = place
    (folder / "slurm.conf").write_text("ClusterName=broken\n")  # sinfo refuses it at once
    monkeypatch.setenv("PATH", slurm_env["PATH"])
    monkeypatch.setenv("SLURM_CONF", str(folder / "slurm.conf"))
    message = (
        "SLURM does not answer (sinfo: fatal: Unable to process configuration file); "
        "check SLURM_CONF and that slurmctld runs, or run here with --local"
    )
    check_entry(capsys, place, SUBMIT, message)
