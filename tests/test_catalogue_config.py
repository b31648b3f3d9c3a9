"""The catalogue of bad inputs: training flags, each refused by `dali-launch train` (catalogue.py says how
an entry runs; the other groups are test_catalogue_data.py, _formats.py, _jobs.py, _other.py and _resume.py)."""

from __future__ import annotations

import pytest
from catalogue import check_entry

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
    pytest.param(
        ["--eval-batch-size", "-1"], "--eval-batch-size -1 must be 0 (auto) or more", id="eval-batch-negative"
    ),
    pytest.param(
        ["--steps-per-call", "-2"], "--steps-per-call -2 must be 0 (auto) or more", id="steps-per-call-negative"
    ),
    pytest.param(["--sync-every-steps", "0"], "--sync-every-steps 0 must be at least 1", id="sync-every-zero"),
    pytest.param(["--prefetch", "0"], "--prefetch 0 must be at least 1", id="prefetch-zero"),
    pytest.param(
        ["--reader-threads", "-1"], "--reader-threads -1 must be 0 (auto) or more", id="reader-threads-negative"
    ),
    pytest.param(
        ["--hw-decoder-load", "1.5"],
        "--hw-decoder-load 1.5 is out of range; use a value in [0, 1]",
        id="hw-decoder-load-range",
    ),
    pytest.param(
        ["--xla-options", "autotune=2"],
        "--xla-options: autotune=2 is no NAME=VALUE pair of XLA's; give space-separated pairs like "
        "xla_gpu_autotune_level=2, or auto, or none",
        id="xla-options-no-pair",
    ),
    pytest.param(
        ["--xla-options", "xla_gpu_autotune_level=high"],
        "--xla-options xla_gpu_autotune_level=high: XLA refuses it (While setting option xla_gpu_autotune_level, "
        "'high' is not a valid int32 value.); fix it",
        id="xla-options-bad-value",
    ),
    pytest.param(
        ["--decoded-cache", "12X"],
        "--decoded-cache 12X is no size; use auto, off, or MiB above 0 like 4096, 512M or 12G",
        id="decoded-cache-no-size",
    ),
    pytest.param(
        ["--decoded-cache", "0"],
        "--decoded-cache 0 is no size; use auto, off, or MiB above 0 like 4096, 512M or 12G",
        id="decoded-cache-zero",
    ),
    pytest.param(
        ["--decoded-cache", "512M", "--sample-order", "global"],
        "--decoded-cache 512M keeps each reader's decoded shard, but --sample-order global reads through an "
        "external source, which has none; leave --decoded-cache out (auto: off there), or use --sample-order shards",
        id="decoded-cache-global-order",
    ),
    pytest.param(
        ["--learning-rate", "0"], "--learning-rate 0.0 is out of range; use a finite value above 0", id="lr-zero"
    ),
    pytest.param(
        ["--learning-rate", "-0.1"],
        "--learning-rate -0.1 is out of range; use a finite value above 0",
        id="lr-negative",
    ),
    pytest.param(
        ["--learning-rate", "inf"], "--learning-rate inf is out of range; use a finite value above 0", id="lr-infinite"
    ),
    pytest.param(
        ["--learning-rate", "nan"], "--learning-rate nan is out of range; use a finite value above 0", id="lr-nan"
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
        "Invalid value for '--parallel': Value error, 'jit' is not one of 'auto', 'sharded', 'pmap'.; see dali-launch --help",
        id="parallel-unknown",
    ),
    pytest.param(
        ["--model", "resnet"],
        "unknown --model resnet; use one of mlp, cnn, cnn-nnx, resnet18, resnet50, vit-ti16, vit-s16, vit-b16, "
        "unet, simclr-cnn, centernet, st-cnn, frame-mean, vivit-ti16, audio-cnn, or package.module:factory",
        id="model-unknown",
    ),
    pytest.param(
        ["--model", "nosuchpkg.models:build"],
        "--model nosuchpkg.models:build: cannot import "
        "nosuchpkg.models (No module named 'nosuchpkg'); install it or put its folder on PYTHONPATH",
        id="model-not-importable",
    ),
    pytest.param(
        ["--model", "{tmp}/code/models.py:build"],
        "--model {tmp}/code/models.py:build names a file, not a module; put its folder on PYTHONPATH and name its "
        "module: PYTHONPATH={tmp}/code dali-launch ... --model models:build",
        id="model-a-file-path",
    ),
    pytest.param(["--nodes", "2"], f"`train` runs one process here; for several use `{TRAIN}`", id="train-two-nodes"),
    pytest.param(
        ["--nodes", "1-2", "--sample-order", "global", "--global-batch-size", "100"],
        "--nodes 1-2 is a range for SLURM to pick from, but `train` runs a fixed count; give one count, e.g. --nodes 1",
        id="train-node-range",
    ),
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


@pytest.mark.parametrize("args, message", CONFIG)
def test_config(capsys, place, nothing_starts, args, message):
    check_entry(capsys, place, ["train", *args, "--data-dir", "{data}", "--run-root", "{root}"], message)
