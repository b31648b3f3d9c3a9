"""--task video trained for real on `data synth --format video`'s clips (conftest's video_set: 6 classes, the
cyclic orders of four colours, 192 training and 48 test clips of 12 frames of 16×16): a model of time learns them
where the model that averages frames cannot (that one through the Python API); kill -9 then --resume ends with the
uninterrupted run's parameters; two --local processes, their state split by --mesh data:1,fsdp:2, train every
clip once an epoch, and once in an epoch cut mid-way and resumed on one device (elastic resume)."""

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

# The command with no flag but the data's and --image-size (every default: SGD at 0.1, 50 clips a step, 4 steps an
# epoch). Test accuracy over videos after 5 epochs: st-cnn reaches 1.0 here; chance is 1/6, and frame-mean, which
# sees the bag of a clip's frames (the same for every class), stays at 0.08-0.21.
BOUND, CHANCE_BOUND, EPOCHS = 0.8, 0.4, 5
SETTINGS = {"task": "video", "num_classes": 6, "image_size": 16}
TRAIN = [f"--{key.replace('_', '-')}={value}" for key, value in SETTINGS.items()]
# The uninterrupted run of st-cnn, and the one killed: 4 steps an epoch, a checkpoint at each epoch's end and
# after its 2nd step (--checkpoint-every-steps counts an epoch's steps): steps 2, 4, 6, 8...
WHOLE = ["--epochs", str(EPOCHS), "--checkpoint-every-steps", "2", "--record-samples"]
# The two processes' run: 12 steps of 16 an epoch, so that it stops inside its second epoch
MESH_TRAIN = [*TRAIN, "--global-batch-size", "16", "--optimizer", "adamw", "--learning-rate", "3e-3"]


def _epochs(paths) -> list[dict]:
    return [json.loads(line) for line in paths.metrics.read_text().splitlines()]


@pytest.fixture(scope="module")
def whole(video_set, tmp_path_factory):
    """`dali-launch train --task video` on the clips (its own pipeline and st-cnn), never interrupted."""
    root = tmp_path_factory.mktemp("whole")
    check_ok(dali_launch("train", "--data-dir", str(video_set), *TRAIN, *WHOLE, "--run-root", str(root)))
    return only_run(root)


def test_a_model_of_time_learns_what_averaging_frames_cannot(whole, video_set, tmp_path):
    """st-cnn beats the bound; the frame-averaging baseline, trained on the same clips and steps through the Python
    API, stays near chance. Evaluation scores the two evenly spaced clips of every test video."""
    config = json.loads((whole.root / "config.json").read_text())
    assert (config["data"]["pipeline"], config["model"]["model"]) == ("video", "st-cnn")
    epochs = _epochs(whole)
    assert [(e["train_samples"], e["test_count"]) for e in epochs] == [(192, 48)] * EPOCHS
    assert epochs[-1]["test_accuracy"] >= BOUND and epochs[-1]["test_clip_accuracy"] >= BOUND, epochs[-1]

    job = Executor("here", run_root=tmp_path / "api").submit(
        model="frame-mean", data_dir=video_set, epochs=EPOCHS, **SETTINGS
    )
    job.result(timeout_s=600)
    epochs = _epochs(RunPaths(job.run_dir))
    assert [e["train_samples"] for e in epochs] == [192] * EPOCHS
    assert epochs[-1]["test_accuracy"] <= CHANCE_BOUND and epochs[-1]["train_accuracy"] <= CHANCE_BOUND, epochs


def test_kill_9_mid_epoch_then_resume_ends_with_the_uninterrupted_parameters(whole, video_set, tmp_path):
    """The random start, crop and flip are DALI's random operators and the reader's shuffle its own, all kept in
    DALI's checkpoints: killed after a mid-epoch checkpoint, the resumed run trains on the very same clips (their
    fingerprints) and ends with the parameters of the run never killed."""
    proc = start("train", "--data-dir", str(video_set), *TRAIN, *WHOLE, "--run-root", str(tmp_path))
    kill_when(proc, lambda: has_checkpoint(tmp_path) and any(tmp_path.glob("*/samples/*.npy")), timeout_s=300)
    cut = only_run(tmp_path)
    assert proc.returncode == -signal.SIGKILL and not cut.result.exists()
    resumed = dali_launch("train", "--resume", str(cut.root))
    check_ok(resumed)
    assert "resumed from checkpoint" in resumed.stdout, resumed.stdout
    result = lambda paths: json.loads(paths.result.read_text())
    assert result(cut)["checksums"] == result(whole)["checksums"]
    for epoch in range(EPOCHS):
        assert seen_prints(cut, epoch) == seen_prints(whole, epoch), epoch


def _reference_prints(split) -> collections.Counter:
    """Every training clip once, one shard, through the unaugmented pipeline the runs read (its first frames)."""
    from unaugmented_pipelines import video

    args = PipelineArgs(str(split), 0, 1, 192, False, False, "cpu", 0, 6, 16)
    pipe = pipeline_def(lambda: tuple(video(args)), batch_size=192, num_threads=1, device_id=None)()
    pipe.build()
    clips, labels = (np.array(out.as_tensor()) for out in pipe.run())
    return collections.Counter(fingerprints([clips, labels]).tolist())


def _mid_second_epoch(root) -> bool:
    """A checkpoint inside epoch 1 (steps 13-23 of 12 an epoch), and both ranks' records of that epoch up to it
    (written after the checkpoint)."""
    inside = any(p.name.isdigit() and 12 < int(p.name) < 24 for p in root.glob("*/checkpoints/*"))
    return inside and len(list(root.glob("*/samples/epoch-1-rank-*"))) >= 2


@pytest.mark.multiprocess
def test_two_processes_on_a_mesh_then_one_device_train_every_clip_once_an_epoch(video_set, tmp_path):
    """2 processes × 1 device, a small MLP of clips whose first kernel --mesh data:1,fsdp:2 splits between them, the
    video reader's shards (96 clips each, shuffled) with the random start and crop left out, so each clip's
    fingerprint is known: every clip trained on once in epoch 0; killed in epoch 1 after a checkpoint, the run
    resumed on one device (the rest of the epoch from the two shards' pipelines) trains every clip once in it."""
    from video_models import clip_mlp

    env = {"PYTHONPATH": str(REPO / "tests")}
    topology = ["--local", "--processes", "2", "--gpus-per-node", "2", "--mesh", "data:1,fsdp:2"]
    data = ["--data-dir", str(video_set), *MESH_TRAIN, "--pipeline", "unaugmented_pipelines:video"]
    flags = ["--model", "video_models:clip_mlp", "--epochs", "2", "--checkpoint-every-steps", "8"]
    proc = start(*topology, "--init-timeout-s", "60", *data, *flags, "--record-samples", "--run-root", str(tmp_path),
                 env=env)  # fmt: skip
    kill_when(proc, lambda: _mid_second_epoch(tmp_path), timeout_s=300)
    cut = only_run(tmp_path)
    assert proc.returncode == -signal.SIGKILL and not cut.result.exists(), proc.stderr.read()
    ranks = json.loads(cut.rank_map.read_text())
    assert [r["resolved"]["mesh"] for r in ranks] == ["fsdp:2"] * 2
    whole = 12 * _parameters(clip_mlp(6))  # float32 parameters and AdamW's two moments
    # the first kernel (99.5 % of the weights) is split: a device holds just over half the state
    assert 0.5 * whole < ranks[0]["state_bytes_per_device"] < 0.52 * whole, (ranks[0]["state_bytes_per_device"], whole)

    one = ["--gpus-per-node", "1", "--processes", "1", "--mesh", "auto"]
    resumed = dali_launch("--resume", str(cut.root), *one, env=env)
    check_ok(resumed)
    assert "elastic resume: 2 -> 1 devices, global batch 16 kept (16 per device)" in resumed.stdout, resumed.stdout
    expected = _reference_prints(video_set / "training")
    assert sum(expected.values()) == len(expected) == 192
    for epoch in range(2):
        assert seen_prints(cut, epoch) == expected, epoch
    epochs = _epochs(cut)
    assert [(e["train_samples"], e["test_count"], e["eval_devices"]) for e in epochs] == [(192, 48, 2), (192, 48, 1)]
    assert epochs[1]["resumed_at_call"] == 8, epochs
    # it learns (0.71 here after 2 epochs, chance 1/6): the sharded state trained, and went on whole on one device
    assert epochs[1]["train_loss"] < epochs[0]["train_loss"] and epochs[1]["test_accuracy"] > CHANCE_BOUND, epochs


def _parameters(model) -> int:
    """The model's parameters for clips of 8 frames of 16×16 (abstract: nothing computed)."""
    import math

    import jax

    clip = jax.ShapeDtypeStruct((1, 8, 16, 16, 3), "float32")
    return sum(math.prod(x.shape) for x in jax.tree.leaves(jax.eval_shape(model.init, jax.random.PRNGKey(0), clip)))
