"""--task segmentation trained for real on `data synth --format segmentation`'s scenes (conftest's
segmentation_set: 4 classes, 200 training and 40 test scenes): to its mean-IoU bound on one device, over two
--local processes reading every sample once an epoch, through kill -9 and --resume to the same parameters,
and with its state sharded by --mesh data:1,fsdp:2."""

from __future__ import annotations

import collections
import json
import signal

import numpy as np
import pytest
from conftest import REPO, check_ok, dali_launch, kill_when, start
from nvidia.dali import pipeline_def
from run_readers import has_checkpoint, only_run, seen_prints

from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.observe.replicas import fingerprints

pytestmark = [pytest.mark.slow]

# Test mean IoU after 4 epochs (100 steps of 8): the runs here reach 0.75-0.8. Predicting the background
# everywhere (~72 % of the pixels) scores ~0.18: the mean of its IoU and three zeros.
BOUND = 0.6
TRAIN = [
    *["--task", "segmentation", "--num-classes", "4", "--image-size", "32"],
    *["--optimizer", "adamw", "--learning-rate", "3e-3", "--global-batch-size", "8"],
]


def _epochs(paths) -> list[dict]:
    return [json.loads(line) for line in paths.metrics.read_text().splitlines()]


def test_the_whole_command_trains_to_its_bound(segmentation_set, tmp_path):
    """`--task segmentation --data-dir DIR --num-classes 4`: the task's own pipeline and model, every training
    and test scene each epoch, the headline its mean IoU."""
    proc = dali_launch(
        "train", "--data-dir", str(segmentation_set), *TRAIN, "--epochs", "4", "--run-root", str(tmp_path)
    )
    check_ok(proc)
    paths = only_run(tmp_path)
    config = json.loads((paths.root / "config.json").read_text())
    assert (config["data"]["pipeline"], config["model"]["model"]) == ("segmentation", "unet")
    epochs = _epochs(paths)
    assert [(e["train_samples"], e["test_count"]) for e in epochs] == [(200, 40)] * 4
    assert epochs[-1]["test_miou"] >= BOUND and epochs[-1]["test_pixel_accuracy"] > 0.85, epochs[-1]
    assert epochs[-1]["train_pixel_accuracy"] > epochs[0]["train_pixel_accuracy"]
    assert f"done: test miou {epochs[-1]['test_miou']:.4f} after 4 epochs" in proc.stdout, proc.stdout


def _reference_prints(split) -> collections.Counter:
    """Every training scene once, one shard in file order, through the unaugmented pipeline the run reads."""
    from unaugmented_pipelines import segmentation

    args = PipelineArgs(str(split), 0, 1, 200, False, False, "cpu", 0, 4, 32)
    pipe = pipeline_def(lambda: tuple(segmentation(args)), batch_size=200, num_threads=1, device_id=None)()
    pipe.build()
    images, masks = (np.array(out.as_tensor()) for out in pipe.run())
    return collections.Counter(fingerprints([images, masks]).tolist())


@pytest.mark.multiprocess
def test_two_local_processes_train_every_scene_once_an_epoch(segmentation_set, tmp_path):
    """2 processes × 1 device, the segmentation reader's shards (100 scenes each) with its crops left out, so
    each scene's fingerprint is known: every one trained on exactly once in each epoch, replicas identical."""
    proc = dali_launch(
        *["--local", "--processes", "2", "--gpus-per-node", "2", "--init-timeout-s", "60"],
        *["--data-dir", str(segmentation_set), *TRAIN, "--pipeline", "unaugmented_pipelines:segmentation"],
        *["--epochs", "2", "--record-samples", "--run-root", str(tmp_path)],
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    check_ok(proc)
    paths = only_run(tmp_path)
    expected = _reference_prints(segmentation_set / "training")
    assert sum(expected.values()) == len(expected) == 200
    for epoch in range(2):
        assert seen_prints(paths, epoch) == expected, epoch
    epochs = _epochs(paths)
    assert [(e["train_samples"], e["test_count"], e["eval_devices"]) for e in epochs] == [(200, 40, 2)] * 2
    assert epochs[-1]["test_miou"] > 0.4 and "2 replicas identical" in proc.stdout, (epochs[-1], proc.stdout)


def test_kill_9_mid_epoch_then_resume_ends_with_the_uninterrupted_parameters(segmentation_set, tmp_path):
    """The crops and flips are DALI's random operators, whose state its checkpoints keep with the reader's
    position: killed after a mid-epoch checkpoint, the resumed run trains on the very same crops (their
    fingerprints) and ends with the parameters of the run never killed."""
    common = ["--data-dir", str(segmentation_set), *TRAIN, "--epochs", "2", "--checkpoint-every-steps", "5"]
    common += ["--record-samples"]
    check_ok(dali_launch("train", *common, "--run-root", str(tmp_path / "whole")))
    whole = only_run(tmp_path / "whole")

    proc = start("train", *common, "--run-root", str(tmp_path / "cut"))
    # A checkpoint, and the record of the samples before it (written just after it): kill at once.
    saved = lambda: has_checkpoint(tmp_path / "cut") and any((tmp_path / "cut").glob("*/samples/*.npy"))
    kill_when(proc, saved, timeout_s=300)
    cut = only_run(tmp_path / "cut")
    assert proc.returncode == -signal.SIGKILL and not cut.result.exists()
    resumed = dali_launch("train", "--resume", str(cut.root))
    check_ok(resumed)
    assert "resumed from checkpoint" in resumed.stdout, resumed.stdout
    result = lambda paths: json.loads(paths.result.read_text())
    assert result(cut)["checksums"] == result(whole)["checksums"]
    for epoch in range(2):
        assert seen_prints(cut, epoch) == seen_prints(whole, epoch), epoch
    assert [e["test_miou"] for e in _epochs(cut)][-1] == [e["test_miou"] for e in _epochs(whole)][-1]


def test_fsdp_shards_its_state_and_trains_it_to_the_bound(segmentation_set, tmp_path):
    """--mesh data:1,fsdp:2 on two CPU devices: the U-Net's parameters and AdamW's moments split over both,
    the steps those of the data-parallel run, to the same bound."""
    proc = dali_launch(
        *["train", "--gpus-per-node", "2", "--mesh", "data:1,fsdp:2", "--data-dir", str(segmentation_set), *TRAIN],
        *["--epochs", "4", "--run-root", str(tmp_path)],
    )
    check_ok(proc)
    paths = only_run(tmp_path)
    first_rank = json.loads(paths.rank_map.read_text())[0]
    assert first_rank["resolved"]["mesh"] == "fsdp:2"  # an axis of 1 goes unsaid
    # The three largest kernels (2/3 of the weights) are split: the state a device holds is ~2/3 of it.
    whole = 3 * 4 * _parameters()  # float32 parameters and AdamW's two moments
    assert 0.6 * whole < first_rank["state_bytes_per_device"] < 0.7 * whole, (
        first_rank["state_bytes_per_device"],
        whole,
    )
    epochs = _epochs(paths)
    assert [e["train_samples"] for e in epochs] == [200] * 4 and epochs[-1]["test_miou"] >= BOUND, epochs[-1]


def _parameters() -> int:
    """The U-Net's parameters for 4 classes (abstract: nothing computed)."""
    import math

    import jax

    from dali_launch.trainer.model.unet import UNet

    init = lambda: UNet(num_classes=4).init(jax.random.PRNGKey(0), jax.numpy.zeros((1, 32, 32, 3)))
    return sum(math.prod(x.shape) for x in jax.tree.leaves(jax.eval_shape(init)))
