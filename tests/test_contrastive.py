"""`--task contrastive` (tasks/contrastive.py): SimCLR on `data synth` class folders, trained for real on CPU, its
negatives spanning the job in every layout, its pipeline's two views, and a model it cannot use refused."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from catalogue import check_entry, synth_set
from conftest import REPO, check_ok, dali_launch
from run_readers import only_run

from dali_launch.trainer.data import dali
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.data.views import views
from dali_launch.trainer.tasks.contrastive import contrastive

pytestmark = pytest.mark.slow

OUTPUTS = contrastive().outputs
TASK = ["--task", "contrastive", "--num-classes", "4", "--image-size", "32"]
# 100 samples a step (3 steps an epoch of 210), SGD at a third of its default rate: at 0.1 the loss of this
# batch rose again after 3 epochs, the probe's accuracy with it (0.8, then 0.3 by the 8th)
LEARN = [*TASK, "--global-batch-size", "100", "--learning-rate", "0.03", "--epochs", "6"]
# Measured at the last two epochs, one process | two: contrastive 4.68, 4.68 | 4.71, 4.86 from 5.14 (chance:
# log(199) = 5.29); probe accuracy 0.85, 0.9 | 0.75, 0.825 (chance: 0.25)
FALL = 0.2
PROBE_BOUND = 0.7


def _epochs(root) -> list[dict]:
    return [json.loads(line) for line in only_run(root).metrics.read_text().splitlines()]


def _learnt(epochs: list[dict]) -> None:
    """The contrastive loss fell and the linear probe reads the classes well above chance, by the last two epochs
    (an online probe chases features that move: its accuracy wavers by a few test images from epoch to epoch)."""
    contrastive, accuracy = [e["train_contrastive"] for e in epochs], [e["test_probe_accuracy"] for e in epochs]
    assert min(contrastive[-2:]) < contrastive[0] - FALL, contrastive
    assert max(accuracy[-2:]) >= PROBE_BOUND, accuracy
    assert epochs[-1]["headline"] == "test_probe_accuracy" and epochs[-1]["test_count"] == 40


def test_contrastive_learning_lifts_the_probe_well_above_chance(synth_sets, tmp_path):
    """The whole command (the task's own pipeline and model) on one device."""
    proc = dali_launch("train", *LEARN, "--data-dir", str(synth_sets["folders"]), "--run-root", str(tmp_path))
    check_ok(proc)
    assert "test probe accuracy" in proc.stdout
    _learnt(_epochs(tmp_path))


@pytest.mark.multiprocess
def test_two_processes_learn_it_too(synth_sets, tmp_path):
    """2 processes × 1 device, 50 samples each a step: the negatives of each view come from both processes."""
    proc = dali_launch(
        *["--local", "--processes", "2", "--gpus-per-node", "2", "--init-timeout-s", "60"],
        *LEARN,
        *["--data-dir", str(synth_sets["folders"]), "--run-root", str(tmp_path)],
    )
    check_ok(proc)
    epochs = _epochs(tmp_path)
    assert {e["train_samples"] for e in epochs} == {210}
    _learnt(epochs)


# One step an epoch: 212 rows (210 samples and 2 of padding) in every layout, so the epoch's loss is the loss of
# that one step at the same initial parameters. The views have no randomness (DALI's draws depend on the shard).
ONE_STEP = [*TASK, "--epochs", "1", "--global-batch-size", "212", "--pipeline", "unaugmented_pipelines:views"]
LAYOUTS = {
    "one-device": ["train", "--gpus-per-node", "1"],
    # 2 processes × 2 devices, each device its own 53 rows: only a job-wide gather sees every negative
    "pmap-2x2": ["--local", "--processes", "2", "--gpus-per-node", "4", "--parallel", "pmap"],
    "sharded-2x2": ["--local", "--processes", "2", "--gpus-per-node", "4", "--parallel", "sharded"],
}


@pytest.mark.multiprocess
def test_the_negatives_span_the_job_in_every_layout(synth_sets, tmp_path):
    """The contrastive loss of the one step is the same over 4 devices of 2 processes, each device holding its own
    rows (pmap), or one program over them (sharded), as on one device: every view of every device is a negative,
    padding none. A loss over each device's own rows alone gave 4.62 under pmap, against 5.96."""
    found = {}
    for name, layout in LAYOUTS.items():
        local = ["--init-timeout-s", "60"] if "--local" in layout else []
        proc = dali_launch(
            *layout,
            *local,
            *ONE_STEP,
            *["--data-dir", str(synth_sets["folders"]), "--run-root", str(tmp_path / name)],
            env={"PYTHONPATH": str(REPO / "tests")},
        )
        check_ok(proc)
        (epoch,) = _epochs(tmp_path / name)
        assert (epoch["train_samples"], epoch["step"]) == (210, 1), name
        found[name] = epoch
    reference = found.pop("one-device")
    assert 5.5 < reference["train_contrastive"] < np.log(419)  # chance: 419 other views, none nearer
    for name, epoch in found.items():
        for metric in ("train_loss", "train_contrastive", "train_pair_accuracy", "train_probe_loss"):
            assert epoch[metric] == pytest.approx(reference[metric], rel=1e-5), (name, metric)


def _views(split, training: bool, augment: str = "none") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One batch of 8 of `views` built as a run builds it (dali.py's graph: its outputs checked, --augment's
    conditionals on), on the CPU: view1, view2, labels."""
    args = PipelineArgs(str(split), 0, 1, 8, training, False, "cpu", 0, 4, 32, augment=augment)
    graph = dali.augmented_graph if augment != "none" else dali.graph
    pipe = graph(views, args, "views", OUTPUTS, batch_size=8, num_threads=1, device_id=None, seed=3)
    pipe.build()
    return tuple(np.stack([np.asarray(sample) for sample in output]) for output in pipe.run())


@pytest.mark.parametrize("augment", ["none", "randaugment"])
def test_views_differ_in_training_and_are_the_image_in_evaluation(synth_sets, augment):
    split = synth_sets["folders"] / "training"
    first, second, labels = _views(split, training=True, augment=augment)
    assert first.shape == second.shape == (8, 32, 32, 3) and first.dtype == np.float32
    assert labels.shape == (8,) and set(labels.tolist()) <= set(range(4))
    assert all(np.abs(first - second).mean(axis=(1, 2, 3)) > 0.05)  # every pair drawn apart
    first, second, labels = _views(split, training=False, augment=augment)
    np.testing.assert_array_equal(first, second)
    assert labels.tolist() == sorted(labels.tolist())  # evaluation reads in order, unshuffled
    again, _, _ = _views(split, training=False)
    np.testing.assert_array_equal(first, again)  # and deterministically, --augment or not


CONTRASTIVE = ["train", "--task", "contrastive", "--data-dir", "{data}", "--num-classes", "3", "--run-root", "{root}"]
NEEDS = (
    "but --task contrastive needs a dict with 'projection' (1, any width: what the loss compares) and 'probe' (1, 3: a "
    "linear probe's logits on features whose gradient is stopped); use --model simclr-cnn, or return both"
)


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(
            ["--model", "cnn", "--image-size", "32"],
            f"--model cnn returns an array of shape (1, 3) for one sample, {NEEDS}",
            id="logits-only",
        ),
        pytest.param(
            ["--pipeline", "folders"],
            "--pipeline folders gives images, labels, but --task contrastive takes view1, view2, labels; leave "
            "--pipeline out to take the task's own (views)",
            id="a-pipeline-of-one-image",
        ),
        pytest.param(
            ["--mixup", "0.2"],
            "--mixup 0.2: --task contrastive does not take --mixup; leave it out",
            id="a-classification-option",
        ),
    ],
)
def test_what_the_task_cannot_use_is_one_line(capsys, place, nothing_starts, args, message):
    check_entry(capsys, place, [*CONTRASTIVE, *args], message, make=synth_set("folders"))


def test_the_views_are_not_for_classification(capsys, place, nothing_starts):
    args = ["train", "--pipeline", "views", "--data-dir", "{data}", "--num-classes", "3", "--run-root", "{root}"]
    message = (
        "--pipeline views gives view1, view2, labels, but --task classification takes images, labels; add --task "
        "contrastive"
    )
    check_entry(capsys, place, args, message, make=synth_set("folders"))


def test_a_model_of_ones_own_without_a_probe_is_refused(capsys, place, nothing_starts, tmp_path_factory, monkeypatch):
    package = tmp_path_factory.mktemp("heads")  # not in the entry's folder: importing it writes __pycache__
    (package / "heads.py").write_text(
        "import flax.linen as nn\n\n\n"
        "class Projection(nn.Module):\n"
        "    num_classes: int = 10\n\n"
        "    @nn.compact\n"
        "    def __call__(self, x):\n"
        "        return {'projection': nn.Dense(8)(x.reshape(x.shape[0], -1))}\n"
    )
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.delitem(sys.modules, "heads", raising=False)
    message = "--model heads:Projection returns {{'projection': (1, 8)}} for one sample, " + NEEDS  # {{: format()'s
    args = [*CONTRASTIVE, "--model", "heads:Projection", "--image-size", "32"]
    check_entry(capsys, place, args, message, make=synth_set("folders"))
