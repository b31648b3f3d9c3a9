"""--task detection (trainer/tasks/detection.py) with its model (--model centernet) on `data synth --format
detection` data: CenterNet's arithmetic on hand-made boxes, and real runs trained to a stated bound (one process,
--local 2 processes, and a run cut on 2 processes resumed on 1, each sample once). The data, the pipeline and
the refusals of bad input are test_detection_data.py's."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import check_ok, dali_launch
from run_readers import only_run, seen_prints

from dali_launch.launcher.cli import main
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model.registry import create_model
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.tasks import centers
from dali_launch.trainer.tasks.detection import SCORE, THRESHOLDS, detection, summary

SIDE, CLASSES = 64, 3


def test_centernet_gives_its_three_heads_on_a_grid_a_quarter_of_the_image():
    """Traced, not computed (a CPU compiles its random initialisers for seconds): the shapes the task takes."""
    model = create_model("centernet", CLASSES)
    images = jax.ShapeDtypeStruct((2, SIDE, SIDE, 3), np.float32)
    heads, _ = jax.eval_shape(lambda x: model.init_with_output(jax.random.PRNGKey(0), x), images)
    grid = (2, SIDE // 4, SIDE // 4)
    assert {name: head.shape for name, head in heads.items()} == {
        "heatmap": (*grid, CLASSES),
        "size": (*grid, 2),
        "offset": (*grid, 2),
    }
    detection(CLASSES).check_model("centernet", jax.tree.map(lambda x: x.update(shape=(1, *x.shape[1:])), heads))


# --- CenterNet's arithmetic, on hand-made boxes ------------------------------------------------------

GRID = (16, 16)
# relative (left, top, right, bottom): two objects of classes 2 and 0, then a padding row
BOXES = np.array([[0.1, 0.2, 0.3, 0.5], [0.6, 0.55, 0.9, 0.8], [0, 0, 0, 0]], np.float32)
CLASSES_OF = np.array([2, 0, 0], np.int32)
VALID = np.array([1, 1, 0], np.float32)


def _perfect_heads():
    """Heads that say exactly the targets: logits far past the heatmap's peaks, sizes and offsets at the centres."""
    target = centers.heatmap(BOXES, CLASSES_OF, VALID, GRID, CLASSES)
    centre, size, cell = centers.centres(BOXES, GRID)
    heads = {"heatmap": np.where(np.asarray(target) >= 1, 20.0, -20.0).astype(np.float32)}
    heads["size"], heads["offset"] = np.zeros((*GRID, 2), np.float32), np.zeros((*GRID, 2), np.float32)
    for m in range(2):
        x, y = np.asarray(cell[m])
        heads["size"][y, x], heads["offset"][y, x] = size[m], centre[m] - cell[m]
    return target, heads


def test_the_targets_peak_at_each_real_objects_centre_in_its_class_alone():
    target, _ = _perfect_heads()
    peaks = np.argwhere(np.asarray(target) >= 1)
    # centres (0.2, 0.35) and (0.75, 0.675) of a 16x16 grid: cells (x 3, y 5) and (x 12, y 10)
    assert sorted(map(tuple, peaks)) == [(5, 3, 2), (10, 12, 0)]  # (y, x, class); the padding row renders none
    assert np.asarray(target)[..., 1].max() == 0 and 0 < np.asarray(target)[5, 4, 2] < 1  # a Gaussian around


def test_heads_that_say_the_targets_lose_nothing_and_are_found_again():
    target, heads = _perfect_heads()
    assert float(centers.focal(heads["heatmap"], target)) < 1e-3
    size, offset = centers.box_losses(heads["size"], heads["offset"], BOXES, VALID, GRID)
    assert float(size) == float(offset) == 0
    boxes, classes, scores = centers.peaks(heads, 4)
    np.testing.assert_allclose(boxes[:2][np.argsort(classes[:2])[::-1]], BOXES[:2], atol=1e-6)
    hits = centers.matched(boxes, classes, BOXES, CLASSES_OF, VALID)
    assert list(np.asarray(hits)) == [True, True, False, False] and float(scores[2]) < 1e-6


def test_a_prediction_matches_one_object_of_its_class_at_half_overlap():
    predicted = np.array([[0.1, 0.2, 0.3, 0.5], [0.1, 0.2, 0.3, 0.5], [0.6, 0.55, 0.9, 0.8], [0.1, 0.2, 0.2, 0.3]])
    classes = np.array([2, 2, 1, 2])  # a duplicate, a wrong class, a box of IoU 1/6
    hits = centers.matched(predicted.astype(np.float32), classes, BOXES, CLASSES_OF, VALID)
    assert list(np.asarray(hits)) == [True, False, False, False]


def test_the_summary_reads_recall_and_precision_at_its_score_and_the_curves_area():
    sums = {"objects": 10.0, "count": 4.0}
    sums["true_positives"] = np.array([8.0 if t <= SCORE else 4.0 for t in THRESHOLDS])
    sums["predictions"] = np.array([16.0 if t < SCORE else (10.0 if t == SCORE else 5.0) for t in THRESHOLDS])
    found = summary(sums)
    assert (found["recall"], found["precision"]) == (0.8, 0.8) and found["f1"] == pytest.approx(0.8)
    # points (0.4, 0.8) and (0.8, 0.8 at SCORE, 0.5 below it): the envelope is 0.8 up to recall 0.8
    assert found["ap50"] == pytest.approx(0.8 * 0.8)
    nothing = summary({**sums, "true_positives": 0 * sums["true_positives"], "predictions": 0 * sums["predictions"]})
    assert nothing == {"ap50": 0.0, "recall": 0.0, "precision": 0.0, "f1": 0.0}  # nothing found or predicted


def test_class_ids_of_real_objects_are_bounded_padding_rows_are_not():
    task = detection(num_classes=CLASSES)
    batch = {"classes": np.array([[2, 7, 9], [1, 0, 0]], np.int32), "counts": np.array([2, 1], np.int32)}
    ids = np.asarray(task.bounds.values(batch)["classes"])
    assert (ids.min(), ids.max()) == (0, 7)  # the 9 is padding
    task.bounds.check({"classes": 0}, {"classes": 2}, "training", "detection")
    with pytest.raises(UsageError) as e:
        task.bounds.check({"classes": 0}, {"classes": 7}, "training", "detection")
    assert str(e.value) == "--num-classes 3 but --pipeline detection gave training label 7; use --num-classes 8 or more"


# --- real runs: one process, two processes, a run cut on two resumed on one ---------------------------

TRAIN, TEST = 192, 64
RECIPE = ["--task", "detection", "--num-classes", str(CLASSES), "--image-size", str(SIDE), "--global-batch-size", "16"]
RECIPE += ["--optimizer", "adamw", "--learning-rate", "0.003"]  # SGD at the default 0.1 diverges on the focal loss
TRAINED = ["--epochs", "8"]
BOUND = 0.4  # recall and precision at IoU 0.5 after 8 epochs: 0.66-0.78 seen; an untrained model's under 0.01


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """192 training and 64 test images of ~75x56, 1 to 4 shapes of 3 classes each, as `data synth` writes them."""
    root = tmp_path_factory.mktemp("detection") / "data"
    args = ["--format", "detection", "--classes", str(CLASSES), "--train", str(TRAIN), "--test", str(TEST)]
    assert main(["data", "synth", str(root), *args, "--image-scale", "0.15", "--shard-size", "64"]) == 0
    return root


def _found(run_root: Path) -> dict:
    """The last epoch's test values of the (only) run under `run_root`."""
    return json.loads(only_run(run_root).result.read_text())["final"]


def _trained(final: dict) -> None:
    assert final["test_count"] == TEST and final["headline"] == "test_ap50", final
    assert final["test_recall"] > BOUND and final["test_precision"] > BOUND, final


@pytest.mark.slow
def test_a_bare_detection_command_trains_to_the_bound(data, tmp_path):
    """--task detection brings its pipeline and model: no --pipeline, no --model."""
    proc = dali_launch("train", "--data-dir", str(data), *RECIPE, *TRAINED, "--run-root", str(tmp_path))
    check_ok(proc)
    assert "test ap50" in proc.stdout and "(64 images)" in proc.stdout, proc.stdout
    _trained(_found(tmp_path))


LOCAL = ["--local", "--processes", "2", "--gpus-per-node", "2", "--init-timeout-s", "60", "--record-samples"]


@pytest.fixture(scope="module")
def two_processes(data, tmp_path_factory) -> RunPaths:
    """The bare command through --local on 2 processes of one device each, its samples recorded."""
    root = tmp_path_factory.mktemp("detection-local")
    check_ok(dali_launch(*LOCAL, "--data-dir", str(data), *RECIPE, *TRAINED, "--run-root", str(root)))
    return only_run(root)


def _each_sample_once(paths: RunPaths, epoch: int) -> collections.Counter:
    prints = seen_prints(paths, epoch)
    assert sum(prints.values()) == TRAIN and max(prints.values()) == 1, epoch  # none lost, none repeated
    return prints


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_train_to_the_bound_each_sample_once_an_epoch(two_processes):
    _trained(json.loads(two_processes.result.read_text())["final"])
    for epoch in range(int(TRAINED[1])):
        _each_sample_once(two_processes, epoch)


STOPPER = """
import os
import signal

import flax.linen as nn
import jax

from dali_launch.trainer.model.centernet import CenterNet

_seen = {"calls": 0}


def _stop_rank_0(x):
    # SIGTERM to rank 0 at a fixed call of the model: every rank agrees at the next sync point, checkpoints, stops.
    _seen["calls"] += 1
    if jax.process_index() == 0 and _seen["calls"] == int(os.environ.get("STOP_AT", "0")):
        os.kill(os.getpid(), signal.SIGTERM)


class Stopping(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        jax.debug.callback(_stop_rank_0, x[0, 0, 0, 0])
        return CenterNet(num_classes=self.num_classes)(x)


def stopping(num_classes):
    return Stopping(num_classes=num_classes)
"""


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_run_cut_on_two_processes_resumes_on_one_each_sample_once(data, two_processes, tmp_path):
    """Stopped by SIGTERM in epoch 0 (12 steps of 16), resumed on 1 process of 1 device: the rest of the epoch
    is read by the two old pipelines there; every training image of epoch 0 was read once over both parts, and
    they are the uninterrupted run's samples (with its flips)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "stopper.py").write_text(STOPPER)
    env = {"PYTHONPATH": str(tmp_path / "pkg")}
    flags = ["--model", "stopper:stopping", "--epochs", "1", "--sync-every-steps", "1", "--checkpoint-every-steps", "0"]
    cut = dali_launch(
        *LOCAL,
        "--data-dir",
        str(data),
        *RECIPE,
        *flags,
        "--run-root",
        str(tmp_path / "cut"),
        env={**env, "STOP_AT": "5"},
    )
    assert cut.returncode != 0 and "checkpoint written" in cut.stderr, cut.stderr
    paths = only_run(tmp_path / "cut")
    assert not paths.result.exists() and 0 < saved.newest(paths).calls_done < TRAIN // 16
    resumed = dali_launch("--resume", str(paths.root), "--gpus-per-node", "1", "--processes", "1", env=env)
    check_ok(resumed)
    assert "2 -> 1 devices, global batch 16 kept (16 per device)" in resumed.stdout, resumed.stdout
    assert _each_sample_once(paths, 0) == seen_prints(two_processes, 0)
