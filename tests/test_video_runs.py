"""--task video trained for real on `data synth --format video`'s clips (conftest's video_set: 6 classes, the
cyclic orders of four colours, 192 training and 48 test clips of 12 frames of 16×16): a model of time learns them
where the model that averages frames cannot (one through the CLI, one through the Python API), two --local
processes train every clip once an epoch, and kill -9 then --resume ends with the uninterrupted run's parameters."""

from __future__ import annotations

import collections
import json
import signal

import numpy as np
import pytest
from conftest import REPO, check_ok, dali_launch, kill_when, start
from nvidia.dali import pipeline_def
from run_readers import has_checkpoint, only_run, seen_prints

from dali_launch.launcher.api import Executor
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.observe.replicas import fingerprints
from dali_launch.trainer.run_dir import RunPaths

pytestmark = [pytest.mark.slow]

# Test accuracy over videos after 3 epochs (36 steps of 16): st-cnn reaches 0.95-1.0 here; chance is 1/6, and
# frame-mean, which sees the bag of a clip's frames (the same for every class), stays at 0.10-0.25.
BOUND, CHANCE_BOUND = 0.8, 0.4
SETTINGS = {"task": "video", "num_classes": 6, "image_size": 16, "global_batch_size": 16, "optimizer": "adamw"}
TRAIN = [f"--{key.replace('_', '-')}={value}" for key, value in SETTINGS.items()] + ["--learning-rate", "3e-3"]


def _epochs(paths) -> list[dict]:
    return [json.loads(line) for line in paths.metrics.read_text().splitlines()]


def test_a_model_of_time_learns_what_averaging_frames_cannot(video_set, tmp_path):
    """`dali-launch train --task video` (its own pipeline and st-cnn) beats the bound; the frame-averaging
    baseline, run through the Python API on the same clips and steps, stays near chance. Evaluation scores the
    two evenly spaced clips of every test video."""
    proc = dali_launch(
        "train", "--data-dir", str(video_set), *TRAIN, "--epochs", "3", "--run-root", str(tmp_path / "t")
    )
    check_ok(proc)
    paths = only_run(tmp_path / "t")
    config = json.loads((paths.root / "config.json").read_text())
    assert (config["data"]["pipeline"], config["model"]["model"]) == ("video", "st-cnn")
    epochs = _epochs(paths)
    assert [(e["train_samples"], e["test_count"]) for e in epochs] == [(192, 48)] * 3
    assert epochs[-1]["test_accuracy"] >= BOUND and epochs[-1]["test_clip_accuracy"] >= BOUND, epochs[-1]

    job = Executor("here", run_root=tmp_path / "api").submit(
        model="frame-mean", data_dir=video_set, epochs=3, learning_rate=3e-3, **SETTINGS
    )
    job.result(timeout_s=600)
    baseline = _epochs(RunPaths(job.run_dir))
    assert [e["train_samples"] for e in baseline] == [192] * 3
    assert baseline[-1]["test_accuracy"] <= CHANCE_BOUND and baseline[-1]["train_accuracy"] <= CHANCE_BOUND, baseline


def _reference_prints(split) -> collections.Counter:
    """Every training clip once, one shard, through the unaugmented pipeline the run reads (its first frames)."""
    from unaugmented_pipelines import video

    args = PipelineArgs(str(split), 0, 1, 192, False, False, "cpu", 0, 6, 16)
    pipe = pipeline_def(lambda: tuple(video(args)), batch_size=192, num_threads=1, device_id=None)()
    pipe.build()
    clips, labels = (np.array(out.as_tensor()) for out in pipe.run())
    return collections.Counter(fingerprints([clips, labels]).tolist())


@pytest.mark.multiprocess
def test_two_local_processes_train_every_clip_once_an_epoch(video_set, tmp_path):
    """2 processes × 1 device, the video reader's shards (96 clips each, shuffled) with the random start and crop
    left out, so each clip's fingerprint is known: every one trained on exactly once in each epoch."""
    proc = dali_launch(
        *["--local", "--processes", "2", "--gpus-per-node", "2", "--init-timeout-s", "60"],
        *["--data-dir", str(video_set), *TRAIN, "--pipeline", "unaugmented_pipelines:video", "--model", "st-cnn"],
        *["--epochs", "2", "--record-samples", "--run-root", str(tmp_path)],
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    check_ok(proc)
    paths = only_run(tmp_path)
    expected = _reference_prints(video_set / "training")
    assert sum(expected.values()) == len(expected) == 192
    for epoch in range(2):
        assert seen_prints(paths, epoch) == expected, epoch
    epochs = _epochs(paths)
    assert [(e["train_samples"], e["test_count"], e["eval_devices"]) for e in epochs] == [(192, 48, 2)] * 2
    assert "2 replicas identical" in proc.stdout, proc.stdout


def test_kill_9_mid_epoch_then_resume_ends_with_the_uninterrupted_parameters(video_set, tmp_path):
    """The random start, crop and flip are DALI's random operators and the reader's shuffle its own, all kept in
    DALI's checkpoints: killed after a mid-epoch checkpoint, the resumed run trains on the very same clips (their
    fingerprints) and ends with the parameters of the run never killed."""
    common = ["--data-dir", str(video_set), *TRAIN, "--epochs", "2", "--checkpoint-every-steps", "5"]
    common += ["--record-samples"]
    check_ok(dali_launch("train", *common, "--run-root", str(tmp_path / "whole")))
    whole = only_run(tmp_path / "whole")

    proc = start("train", *common, "--run-root", str(tmp_path / "cut"))
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
