"""Issue 31's recipes at CPU scale, as docs/models.md gives them: vit-ti16 at 32×32 with TrivialAugment in
DALI and mixup + cutmix in the step learns a small `data synth` set (in --sample-order global), and a run
fine-tuned from it onto another set of another class count (RandAugment, layer decay, drop path) loads
all but the head and learns too. Real runs, real data; about a minute and a half on two cores."""

from __future__ import annotations

import json
import os

import pytest
import tomllib
from conftest import REPO, check_ok, dali_launch
from run_readers import only_run

from dali_launch.launcher.data.synth import SynthSpec, synth

pytestmark = pytest.mark.slow

VIT = ["--pipeline", "folders", "--image-size", "32", "--model", "vit-ti16", "--optimizer", "adamw"]


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    """The from-scratch recipe on 4 classes (chance 0.25), and its run directory."""
    root = tmp_path_factory.mktemp("vit")
    synth(SynthSpec(root / "four", "folders", classes=4, train=384, test=64, image_scale=0.1, workers=1))
    proc = dali_launch(
        "train", *VIT, "--data-dir", str(root / "four"), "--num-classes", "4",
        "--augment", "trivialaugment", "--mixup", "0.2", "--cutmix", "1.0", "--sample-order", "global",
        "--learning-rate", "1e-3", "--weight-decay", "0.05", "--schedule", "cosine", "--warmup-epochs", "1",
        "--batch-size", "32", "--epochs", "3", "--run-root", str(root / "runs"),
    )  # fmt: skip
    return proc, only_run(root / "runs"), root


def test_a_vit_with_augmentation_and_mixing_learns(learnt):
    proc, paths, _ = learnt
    check_ok(proc)
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("rank 0 on")]
    assert ", trivialaugment," in line and line.endswith("; attention xla (4 tokens)"), line  # it says both
    epochs = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    assert len(epochs) == 3 and epochs[-1]["test_accuracy"] >= 0.6, epochs  # chance: 0.25
    resolved = json.loads(paths.rank_map.read_text())[0]["resolved"]
    assert resolved["attention"] == "xla" and resolved["remat"] == "none"  # --remat auto: its step fits


def test_a_run_fine_tuned_onto_other_classes_loads_all_but_the_head(learnt):
    _, source, root = learnt
    synth(SynthSpec(root / "three", "folders", classes=3, train=96, test=48, seed=1, image_scale=0.1, workers=1))
    relative = os.path.relpath(source.root, REPO) + "/"  # as docs/models.md's "$(ls -d runs/vit/*/ | tail -1)"
    proc = dali_launch(
        "train", *VIT, "--data-dir", str(root / "three"), "--num-classes", "3", "--init-from", relative,
        "--augment", "randaugment", "--layer-decay", "0.75", "--drop-path", "0.1", "--learning-rate", "1e-3",
        "--batch-size", "32", "--epochs", "3", "--run-root", str(root / "tuned"),
    )  # fmt: skip
    check_ok(proc)
    tuned = only_run(root / "tuned")
    assert tomllib.loads(tuned.config_toml.read_text())["model"]["init_from"] == str(source.root)  # recorded absolute
    plan = json.loads(tuned.init_from.read_text())
    assert sorted(plan["reinitialised"]) == ["params/head/bias", "params/head/kernel"] and plan["ignored"] == []
    assert len(plan["loaded"]) == 21 and plan["source"].startswith(str(source.checkpoints))
    said = f"init from {source.root} (its checkpoint "  # resolved once, from where dali-launch ran
    assert said in proc.stdout and "re-initialised 2 (params/head/bias, params/head/kernel)" in proc.stdout
    epochs = [json.loads(line) for line in tuned.metrics.read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [0, 1, 2] and epochs[-1]["test_accuracy"] >= 0.6, epochs  # chance: 1/3
