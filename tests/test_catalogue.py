"""The catalogue of bad inputs, part 2: flags, layouts, SLURM values, CUDA flavours, run roots (part 1,
data sets, is test_catalogue_data.py). Each ends with one exact line on stderr and exit code 2,
nothing written, no job submitted, no device taken.

Each entry is (arguments, the exact message after `dali-launch: error: `). `{tmp}`, `{root}` (the
--run-root, which must never appear) and `{data}` (a good small data set) are filled in per test.
Entries run in-process through `cli.main`; those that need SLURM's own answer use the local cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import run_entry
from test_catalogue_data import DATA

from dali_launch.trainer import flavours

BS = "\\"


TRAIN = "dali-launch --local --nodes N --gpus-per-node G --processes P"
CONFIG = [
    pytest.param(["--bogus"], "No such option: --bogus; see dali-launch --help", id="flag-unknown"),
    pytest.param(
        ["--epochs", "many"],
        "Invalid value for '--epochs': Input should be a valid integer, unable to "
        "parse string as an integer; see dali-launch --help",
        id="epochs-not-a-number",
    ),
    pytest.param(["--epochs", "0"], "--epochs 0 must be at least 1", id="epochs-zero"),
    pytest.param(["--epochs", "-3"], "--epochs -3 must be at least 1", id="epochs-negative"),
    pytest.param(["--batch-size", "0"], "--batch-size 0 must be at least 1", id="batch-zero"),
    pytest.param(["--eval-batch-size", "0"], "--eval-batch-size 0 must be at least 1", id="eval-batch-zero"),
    pytest.param(
        ["--steps-per-call", "-2"], "--steps-per-call -2 must be 0 (auto) or more", id="steps-per-call-negative"
    ),
    pytest.param(["--sync-every-steps", "0"], "--sync-every-steps 0 must be at least 1", id="sync-every-zero"),
    pytest.param(["--prefetch", "0"], "--prefetch 0 must be at least 1", id="prefetch-zero"),
    pytest.param(
        ["--reader-threads", "-1"], "--reader-threads -1 must be 0 (auto) or more", id="reader-threads-negative"
    ),
    pytest.param(["--hw-decoder-load", "1.5"], "--hw-decoder-load 1.5 is out of range", id="hw-decoder-load-range"),
    pytest.param(
        ["--learning-rate", "0"], "--learning-rate 0.0 is out of range; use a value in (0, 100)", id="lr-zero"
    ),
    pytest.param(
        ["--learning-rate", "-0.1"], "--learning-rate -0.1 is out of range; use a value in (0, 100)", id="lr-negative"
    ),
    pytest.param(
        ["--learning-rate", "1e3"], "--learning-rate 1000.0 is out of range; use a value in (0, 100)", id="lr-too-large"
    ),
    pytest.param(
        ["--learning-rate", "nan"], "--learning-rate nan is out of range; use a value in (0, 100)", id="lr-nan"
    ),
    pytest.param(["--momentum", "1.5"], "--momentum 1.5 is out of range; use a value in [0, 1)", id="momentum"),
    pytest.param(["--seed", "-1"], "--seed -1 must be 0 or more", id="seed-negative"),
    pytest.param(
        ["--optimizer", "adam"],
        "Invalid value for '--optimizer': Value error, 'adam' is not one of "
        "'sgd', 'nesterov', 'adamw', 'lamb', 'lars'.; see dali-launch --help",
        id="optimizer-unknown",
    ),
    pytest.param(
        ["--weight-decay", "-0.1"],
        "--weight-decay -0.1 is out of range; use a value in [0, 1)",
        id="weight-decay-negative",
    ),
    pytest.param(
        ["--label-smoothing", "1"],
        "--label-smoothing 1.0 is out of range; use a value in [0, 1)",
        id="label-smoothing-one",
    ),
    pytest.param(["--ema-decay", "1"], "--ema-decay 1.0 is out of range; use a value in [0, 1)", id="ema-decay-one"),
    pytest.param(
        ["--eval-ema"],
        "--eval-ema evaluates the parameters' average, but --ema-decay is 0 (none kept); give --ema-decay, e.g. 0.999",
        id="eval-ema-without-ema",
    ),
    pytest.param(["--clip-norm", "-1"], "--clip-norm -1.0 must be 0 (no clipping) or more", id="clip-norm-negative"),
    pytest.param(["--accumulate-steps", "0"], "--accumulate-steps 0 must be at least 1", id="accumulate-zero"),
    pytest.param(
        ["--warmup-epochs", "1", "--warmup-steps", "100"],
        "--warmup-epochs and --warmup-steps both given; use one of them",
        id="warmup-both",
    ),
    pytest.param(
        ["--warmup-steps", "-1"], "--warmup-epochs 0.0 and --warmup-steps -1 must be 0 or more", id="warmup-negative"
    ),
    pytest.param(
        ["--schedule", "cosine", "--warmup-epochs", "5"],
        "--warmup-epochs 5.0 leaves nothing of --epochs 5 for --schedule cosine; warm up for fewer epochs",
        id="warmup-whole-run",
    ),
    pytest.param(
        ["--schedule", "step"],
        "--schedule step needs --decay-epochs, e.g. --decay-epochs 30,60,80",
        id="step-without-epochs",
    ),
    pytest.param(
        ["--schedule", "step", "--decay-epochs", "3,2"],
        "--decay-epochs '3,2' is not a rising list of epochs; write e.g. 30,60,80",
        id="decay-epochs-falling",
    ),
    pytest.param(
        ["--schedule", "step", "--decay-epochs", "two"],
        "--decay-epochs 'two' is not a rising list of epochs; write e.g. 30,60,80",
        id="decay-epochs-not-numbers",
    ),
    pytest.param(
        ["--decay-epochs", "2"],
        "--decay-epochs is for --schedule step, not constant; leave it out or use --schedule step",
        id="decay-epochs-without-step",
    ),
    pytest.param(
        ["--schedule", "step", "--decay-epochs", "2", "--decay-factor", "0"],
        "--decay-factor 0.0 is out of range; use a value in (0, 1]",
        id="decay-factor-zero",
    ),
    pytest.param(
        ["--precision", "fp16"],
        "Invalid value for '--precision': Value error, 'fp16' is not one of 'fp32', 'bf16'.; see dali-launch --help",
        id="precision-unknown",
    ),
    pytest.param(["--init-timeout-s", "0"], "--init-timeout-s 0 must be at least 1", id="init-timeout-zero"),
    pytest.param(
        ["--heartbeat-timeout-s", "-5"], "--heartbeat-timeout-s -5 must be at least 1", id="heartbeat-timeout-negative"
    ),
    pytest.param(["--barrier-timeout-s", "0"], "--barrier-timeout-s 0 must be at least 1", id="barrier-timeout-zero"),
    pytest.param(
        ["--platform", "cpu", "--decoder", "mixed"],
        "--decoder mixed decodes on the GPU but --platform is cpu; use --decoder cpu",
        id="decoder-mixed-on-cpu",
    ),
    pytest.param(
        ["--decoder", "gpu"],
        "Invalid value for '--decoder': Value error, 'gpu' is not one of 'auto', "
        "'cpu', 'mixed'.; see dali-launch --help",
        id="decoder-unknown",
    ),
    pytest.param(
        ["--readers-per-device", "-1"], "--readers-per-device -1 must be 0 (auto) or more", id="readers-negative"
    ),
    pytest.param(
        ["--readers-per-device", "3", "--steps-per-call", "1"],
        "--readers-per-device 3 does not divide the training batch per "
        "device and call (batch × --steps-per-call), 50; use a divisor of 50 or 0 (auto)",
        id="readers-not-dividing-batch",
    ),
    pytest.param(
        ["--readers-per-device", "4", "--batch-size", "40", "--eval-batch-size", "250"],
        "--readers-per-device 4 does not divide --eval-batch-size, 250; use a divisor of 250 or 0 (auto)",
        id="readers-not-dividing-eval-batch",
    ),
    pytest.param(
        ["--eval-cache-mb", "-1"], "--eval-cache-mb -1 must be 0 (no cache) or more", id="eval-cache-negative"
    ),
    pytest.param(
        ["--parallel", "jit"],
        "Invalid value for '--parallel': Value error, 'jit' is not one of 'sharded', 'pmap'.; see dali-launch --help",
        id="parallel-unknown",
    ),
    pytest.param(
        ["--model", "resnet"],
        "unknown --model resnet; use one of mlp, cnn, resnet18, resnet50, or package.module:factory",
        id="model-unknown",
    ),
    pytest.param(
        ["--model", "nosuchpkg.models:build"],
        "--model nosuchpkg.models:build: cannot import "
        "nosuchpkg.models (No module named 'nosuchpkg'); install it or put its folder on PYTHONPATH",
        id="model-not-importable",
    ),
    pytest.param(["--nodes", "2"], f"`train` runs one process here; for several use `{TRAIN}`", id="train-two-nodes"),
    pytest.param(
        ["--log-every-steps", "-1"],
        "--log-every-steps -1 must be 0 (epoch scalars only) or more",
        id="log-every-negative",
    ),
    pytest.param(
        ["--profile-steps", "5"],
        "--profile-steps 5 is not A:B with 0 <= A < B (global SGD steps, B excluded); e.g. --profile-steps 100:110",
        id="profile-steps-not-a-range",
    ),
    pytest.param(
        ["--profile-steps", "6:5"],
        "--profile-steps 6:5 is not A:B with 0 <= A < B (global SGD steps, B excluded); e.g. --profile-steps 100:110",
        id="profile-steps-backwards",
    ),
    pytest.param(
        ["--profile-ranks", "0,x"],
        "--profile-ranks 0,x is not a comma-separated list of ranks; e.g. 0 or 0,1",
        id="profile-ranks-not-numbers",
    ),
    pytest.param(
        ["--profile-ranks", "1"],
        "--profile-ranks 1 names a rank the job does not have (ranks 0..0); use ranks below 1",
        id="profile-ranks-too-high",
    ),
    pytest.param(
        ["--wandb-project", " "],
        "--wandb-project is empty; name a W&B project, or leave the flag out",
        id="wandb-project-empty",
    ),
]

JOB = ["--local", "--data-dir", "{data}", "--run-root", "{root}"]
LAYOUT = [
    pytest.param(["--nodes", "0"], "--nodes 0 must be at least 1", id="nodes-zero"),
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
        ["--nodes", "2", "--gpus-per-node", "2", "--global-batch-size", "50"],
        "--global-batch-size 50 is not divisible by 4 devices (2 nodes × 2 GPUs); use a multiple of 4",
        id="global-batch-not-dividing",
    ),
    pytest.param(["--local-timeout-s", "0"], "--local-timeout-s 0 must be at least 1", id="local-timeout-zero"),
]

SUBMIT = ["--nodes", "1", "--platform", "cpu", "--data-dir", "{data}", "--run-root", "{root}"]
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

OTHER = [
    pytest.param(
        ["--epochs", "2", "train"],
        "--epochs goes after the command: dali-launch train --epochs ...",
        id="flag-before-command",
    ),
    pytest.param(
        ["train", "--data-dir", "{data}", "--run-root", "{tmp}/file/runs"],
        "cannot create --run-root {tmp}/file/runs: {tmp}/file is not a folder; choose another --run-root",
        id="run-root-under-a-file",
    ),
    pytest.param(
        ["--local", "--dry-run", "--data-dir", "{data}", "--run-root", "{tmp}/file/runs"],
        "cannot create --run-root {tmp}/file/runs: {tmp}/file is not a folder; choose another --run-root",
        id="run-root-under-a-file-dry-run",
    ),
    pytest.param(
        ["status", "123", "--run-root", "{root}"],
        "no run of job 123 under --run-root {root}; pass its run directory instead",
        id="status-unknown-job",
    ),
    pytest.param(
        ["ci", "--pytest-args", "-k 'a", "--platform", "cpu"],
        '--pytest-args "-k \'a" is not valid shell quoting (No closing quotation); balance its quotes',
        id="ci-pytest-args-quoting",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{tmp}/none", "--to", "{tmp}/out"],
        "--from {tmp}/none is not a directory; point it at MNIST-format IDX files",
        id="prepare-from-missing",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{tmp}/empty", "--to", "{tmp}/out"],
        "no MNIST-format IDX files (train-*/t10k-*-idx?-ubyte[.gz]) in {tmp}/empty",
        id="prepare-no-idx",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{idx}", "--to", "{tmp}/full"],
        "--to {tmp}/full exists and is not empty; remove it or choose another directory",
        id="prepare-to-not-empty",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{idx}", "--to", "{tmp}/out", "--jpeg-quality", "0"],
        "--jpeg-quality 0 is out of range; use 1..100",
        id="prepare-jpeg-quality",
    ),
    pytest.param(
        ["data", "prepare", "--from", "{tmp}/cut", "--to", "{tmp}/out"],
        "{tmp}/cut/t10k-images-idx3-ubyte is truncated: header says (10, 28, 28), found 100 bytes of data",
        id="prepare-idx-truncated",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/full"],
        "OUT {tmp}/full exists and is not empty; remove it or choose another directory",
        id="synth-out-not-empty",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/file/out"],
        "OUT {tmp}/file/out is under a file; choose another directory",
        id="synth-out-under-a-file",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--train", "0"],
        "--train 0: a data set needs at least 1; use a positive count",
        id="synth-zero-train",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--classes", "10", "--train", "5"],
        "--train 5 is fewer than --classes 10; every class needs an image",
        id="synth-fewer-images-than-classes",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--image-scale", "2"],
        "--image-scale 2.0 is out of range; use a value in (0, 1]",
        id="synth-image-scale",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--format", "lmdb"],
        "Invalid value for '--format': Value error, 'lmdb' is not one of 'folders', 'tfrecord', 'webdataset'.; "
        "see dali-launch --help",
        id="synth-unknown-format",
    ),
]


@pytest.mark.parametrize("args, message", CONFIG)
def test_config(capsys, place, nothing_starts, args, message):
    folder, fill = place
    run_entry(capsys, folder, *fill(["train", *args, "--data-dir", "{data}", "--run-root", "{root}"], message, None))


@pytest.mark.parametrize("args, message", LAYOUT)
def test_layout(capsys, place, nothing_starts, args, message):
    folder, fill = place
    run_entry(capsys, folder, *fill([*JOB, *args], message, None))


@pytest.mark.parametrize("args, message", SCRIPT)
def test_slurm_values(capsys, place, nothing_starts, args, message):
    folder, fill = place
    run_entry(capsys, folder, *fill([*SUBMIT, *args], message, None))


@pytest.mark.parametrize("args, message", OTHER)
def test_other(capsys, place, nothing_starts, args, message):
    folder, fill = place
    run_entry(capsys, folder, *fill(args, message, None))


# --- entries that need the installed packages, SLURM, or the kernel's permission checks ---------------


def _fake_distribution(site: Path, name: str, version: str) -> None:
    """An installed distribution as importlib.metadata sees it: a dist-info folder on sys.path."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize("command", [["train"], SUBMIT], ids=["train", "slurm"])
@pytest.mark.parametrize(
    "extra, message",
    [
        pytest.param(
            "jax-cuda",
            "{dali} (CUDA {dali_cuda}) does not match jax-cuda{other}-plugin (CUDA {other}); "
            "pip uninstall -y {dali} && pip install 'dali-launch[cuda{other}]'",
            id="flavour-mismatch",
        ),
        pytest.param(
            "nvidia-dali",
            "both {both} are installed and share one module; pip uninstall -y {both_names}, then install one flavour",
            id="two-dali-flavours",
        ),
    ],
)
def test_flavours(capsys, place, nothing_starts, monkeypatch, command, extra, message):
    """A JAX CUDA plugin of the other CUDA than the installed DALI: refused before any job or device."""
    ((dali, dali_cuda),) = flavours.installed(flavours.DALI).items()
    other = {12: 13, 13: 12}[dali_cuda]
    folder, fill = place
    site = folder / "site"
    name = f"jax-cuda{other}-plugin" if extra == "jax-cuda" else f"nvidia-dali-cuda{other}0"
    _fake_distribution(site, name, "0.0.1")
    monkeypatch.syspath_prepend(str(site))
    both = sorted([dali, f"nvidia-dali-cuda{other}0"])
    message = message.format(
        dali=dali, dali_cuda=dali_cuda, other=other, both=" and ".join(both), both_names=" ".join(both)
    )
    run_entry(capsys, folder, *fill([*command, "--data-dir", "{data}", "--run-root", "{root}"], message, None))


def test_no_sbatch_here(capsys, place, nothing_starts, monkeypatch):
    folder, fill = place
    (folder / "bin").mkdir()
    monkeypatch.setenv("PATH", str(folder / "bin"))
    run_entry(
        capsys,
        folder,
        *fill(
            SUBMIT,
            "sbatch is not on PATH; submit from a machine with SLURM's commands "
            "(a login node), or run here with --local",
            None,
        ),
    )


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
    folder, fill = place
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    run_entry(capsys, folder, *fill([*SUBMIT, *args], message, None))


@pytest.mark.slurm
def test_slurm_broken(capsys, place, nothing_starts, monkeypatch, slurm_env):
    """SLURM's commands are here but its configuration is broken: sinfo's own complaint, before anything."""
    folder, fill = place
    (folder / "slurm.conf").write_text("ClusterName=broken\n")  # sinfo refuses it at once
    monkeypatch.setenv("PATH", slurm_env["PATH"])
    monkeypatch.setenv("SLURM_CONF", str(folder / "slurm.conf"))
    run_entry(
        capsys,
        folder,
        *fill(
            SUBMIT,
            "SLURM does not answer (sinfo: fatal: Unable to process configuration file); "
            "check SLURM_CONF and that slurmctld runs, or run here with --local",
            None,
        ),
    )


def test_the_catalogue_is_long_enough():
    entries = DATA + CONFIG + LAYOUT + SCRIPT + OTHER
    assert len(entries) >= 20 and len({e.id for e in entries}) == len(entries)
