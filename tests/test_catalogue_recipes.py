"""The catalogue of bad inputs: the vision recipe's flags (issue 31): augmentation, mixing, the ViTs,
fine-tuning from a checkpoint. catalogue.py says how an entry runs; what only a task can see (a pipeline
of one's own) is in test_recipes.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from catalogue import check_entry, class_folders, dataset, run_entry

from dali_launch.launcher.route import directory
from dali_launch.launcher.run_config import LaunchConfig, RunConfig

VITS = "--model vit-ti16, vit-s16, vit-b16"
IMAGES = ["--pipeline", "folders", "--image-size", "32"]
RECIPES = [
    pytest.param(
        ["--augment", "mixup"],
        "Invalid value for '--augment': Value error, 'mixup' is not one of 'none', 'randaugment', 'trivialaugment', "
        "'autoaugment'.; see dali-launch --help",
        id="augment-unknown",
    ),
    pytest.param(
        ["--augment", "randaugment", "--randaugment", "2,31", *IMAGES],
        "--randaugment 2,31 is out of range: N (operations per image) must be 1 to 14 and M (their magnitude) "
        "0 to 30; e.g. --randaugment 2,9",
        id="randaugment-magnitude-range",
    ),
    pytest.param(
        ["--augment", "randaugment", "--randaugment", "0,9", *IMAGES],
        "--randaugment 0,9 is out of range: N (operations per image) must be 1 to 14 and M (their magnitude) "
        "0 to 30; e.g. --randaugment 2,9",
        id="randaugment-no-ops",
    ),
    pytest.param(
        ["--randaugment", "two"],
        "--randaugment two is not N,M (two integers); e.g. --randaugment 2,9",
        id="randaugment-not-numbers",
    ),
    pytest.param(
        ["--randaugment", "2,9", *IMAGES],
        "--randaugment 2,9 sets RandAugment's N,M, but --augment is none; add --augment randaugment, or leave "
        "--randaugment out",
        id="randaugment-without-randaugment",
    ),
    pytest.param(
        ["--augment", "trivialaugment", "--randaugment", "3,5", *IMAGES],
        "--randaugment 3,5 sets RandAugment's N,M, but --augment is trivialaugment; add --augment randaugment, or "
        "leave --randaugment out",
        id="randaugment-with-another-augment",
    ),
    pytest.param(
        ["--augment", "trivialaugment"],
        "--augment trivialaugment works on RGB crops (--pipeline folders, tfrecord, webdataset, views or your "
        "own); --pipeline mnist gives flat grey digits; use --augment none",
        id="augment-mnist",
    ),
    pytest.param(
        ["--mixup", "-0.2"],
        "--mixup -0.2 must be 0 (off) or more: it is Beta's alpha (0.2 to 1 are usual)",
        id="mixup-negative",
    ),
    pytest.param(
        ["--cutmix", "1"],
        "--cutmix pastes boxes of HWC images, but --pipeline mnist gives flat vectors; use --mixup, or an image "
        "pipeline",
        id="cutmix-mnist",
    ),
    pytest.param(["--drop-path", "1"], "--drop-path 1.0 is out of range; use a value in [0, 1)", id="drop-path-range"),
    pytest.param(
        ["--drop-path", "0.1", "--model", "resnet50", *IMAGES],
        f"--drop-path is for the ViTs' blocks ({VITS}); --model resnet50 has none: leave --drop-path out",
        id="drop-path-resnet",
    ),
    pytest.param(
        ["--remat", "blocks"],
        f"--remat is for the ViTs' blocks ({VITS}); --model mlp has none: leave --remat out",
        id="remat-mlp",
    ),
    pytest.param(
        ["--layer-decay", "0"],
        "--layer-decay 0.0 is out of range; use a value in (0, 1] (1: off)",
        id="layer-decay-range",
    ),
    pytest.param(
        ["--layer-decay", "0.75", "--model", "cnn"],
        f"--layer-decay is for the ViTs' blocks ({VITS}); --model cnn has none: leave --layer-decay out",
        id="layer-decay-cnn",
    ),
    pytest.param(
        ["--model", "vit-s16", "--pipeline", "folders", "--image-size", "200"],
        "--image-size 200 is not divisible by vit-s16's 16-pixel patches; use a multiple of 16, e.g. 192",
        id="vit-image-size",
    ),
    pytest.param(
        ["--model", "vit-ti16"],
        "--model vit-ti16 cuts images into 16×16 patches, but --pipeline mnist gives 28×28 digits; use an image "
        "pipeline (--pipeline folders, ...) with an --image-size divisible by 16",
        id="vit-mnist",
    ),
    pytest.param(
        ["--vit-pool", "map"],
        "Invalid value for '--vit-pool': Value error, 'map' is not one of 'gap', 'cls'.; see dali-launch --help",
        id="vit-pool-unknown",
    ),
    pytest.param(
        ["--attention", "flash"],
        "Invalid value for '--attention': Value error, 'flash' is not one of 'auto', 'xla', 'cudnn', "
        "'cudnn-padded'.; see dali-launch --help",
        id="attention-unknown",
    ),
    pytest.param(
        ["--attention", "cudnn", "--model", "vit-ti16", *IMAGES],
        "--attention cudnn runs cuDNN's 16-bit kernels, but --precision is fp32; add --precision bf16, or use "
        "--attention auto",
        id="attention-cudnn-fp32",
    ),
    pytest.param(
        ["--init-from", "{tmp}/empty"],
        "--init-from {tmp}/empty: no checkpoint there; give a run directory, one of its checkpoints/STEP folders, "
        "or an Orbax checkpoint folder (with _METADATA)",
        id="init-from-nothing",
    ),
    pytest.param(
        ["--init-from", "{run}"],
        "--init-from {run}: the run has no complete checkpoint yet; wait for its first, or give one of its "
        "checkpoints/STEP folders",
        id="init-from-run-without-checkpoint",
    ),
]


def a_run(tmp) -> dict:
    """The good data set, and a run directory as the launcher writes it, before any checkpoint."""
    run = RunConfig(launch=LaunchConfig(run_root=str(tmp / "old-runs")))
    return {**dataset(tmp), "run": directory.create(run, tmp / "empty", "train").root}


@pytest.mark.parametrize("args, message", RECIPES)
def test_recipes(capsys, place, nothing_starts, args, message):
    make = a_run if "{run}" in args else None
    check_entry(capsys, place, ["train", *args, "--data-dir", "{data}", "--run-root", "{root}"], message, make)


WRITE = """
import sys
import jax, jax.numpy as jnp, numpy as np, orbax.checkpoint as ocp
from dali_launch.trainer.model.registry import create_model
model = create_model("vit-ti16", 10)
shapes = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32))
ocp.PyTreeCheckpointer().save(sys.argv[1], {"params": jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes["params"])})
"""


@pytest.fixture(scope="module")
def vit_at_64(tmp_path_factory):
    """An Orbax checkpoint of one's own: vit-ti16's parameters for 64×64 images (16 position embeddings)."""
    path = tmp_path_factory.mktemp("orbax") / "vit-ti16-64"
    proc = subprocess.run(
        [sys.executable, "-c", WRITE, str(path)], env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300
    )
    assert proc.returncode == 0 and json.loads((path / "_METADATA").read_text())["tree_metadata"]
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(
            ["--model", "vit-ti16"],
            "--init-from {ckpt}: params/pos_embedding is (1, 16, 192) there but (1, 4, 192) in --model vit-ti16; "
            "start from a checkpoint of the same model (only a head of another --num-classes is re-initialised)",
            id="init-from-other-shape",
        ),
        pytest.param(
            ["--model", "cnn"],
            "--init-from {ckpt} shares no variable with --model cnn (it has params/Transformer/encoder_norm/bias, "
            "params/Transformer/encoder_norm/scale, params/Transformer/encoderblock/LayerNorm_0/bias, ...); start "
            "from a checkpoint of the same model",
            id="init-from-other-model",
        ),
    ],
)
def test_an_incompatible_checkpoint_is_refused_before_anything_is_written(
    capsys, place, nothing_starts, vit_at_64, args, message
):
    """The launcher compares the shapes (in a child on the CPU) and names the first that differs."""
    folder, _ = place
    data = class_folders(4)(folder)["data"]  # good data: the check comes after the data's own
    argv = ["train", *args, *IMAGES, "--num-classes", "4", "--init-from", str(vit_at_64), "--data-dir", str(data)]
    run_entry(capsys, folder, [*argv, "--run-root", str(folder / "runs")], message.format(ckpt=vit_at_64))
