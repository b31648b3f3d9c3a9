"""--task audio trained for real on `data synth --format audio`'s rhythms (conftest's audio_set: 4 classes, 200
training and 40 test sounds of 1-1.5 s at 16-32 kHz). Through the CLI with every default (16 kHz, 1 s, 64 mel bins,
SGD at 0.1, batches of 50): well above chance, and killed with kill -9 mid-epoch then resumed to the uninterrupted
run's parameters bit for bit. Through the Python API: two --local processes, the state sharded by --mesh, stopped
mid-epoch and resumed on one device, every sound once an epoch over both processes and both segments."""

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

# The command with no flag but the data's: 4 steps an epoch (200 sounds, 50 a step); test accuracy 1.0 after 3-5 of
# its 5 epochs in the runs here (the set's rhythms are told apart by their order alone: chance is 0.25, and a model
# of time-averaged spectra scores ~0.2, tests/test_audio.py).
BOUND, EPOCHS = 0.6, 5
TRAIN = ["--task", "audio", "--num-classes", "4"]
# Small spectrograms (32 mel bins × 64 frames of 0.64 s at 8 kHz) where the API's run only counts what it reads
SOUNDS = {"num_classes": 4, "sample_rate": 8000, "clip_seconds": 0.64, "mel_bins": 32}


def _epochs(paths) -> list[dict]:
    return [json.loads(line) for line in paths.metrics.read_text().splitlines()]


def _reference_prints(split) -> collections.Counter:
    """Every training sound once, one shard in file order, through the unaugmented pipeline the run reads."""
    from unaugmented_pipelines import audio

    sounds = {"sample_rate": 8000, "clip_seconds": 0.64, "mel_bins": 32}
    args = PipelineArgs(str(split), 0, 1, 200, False, False, "cpu", 0, 4, 32, **sounds)
    pipe = pipeline_def(lambda: tuple(audio(args)), batch_size=200, num_threads=1, device_id=None)()
    pipe.build()
    spectrograms, labels = (np.array(out.as_tensor()) for out in pipe.run())
    return collections.Counter(fingerprints([spectrograms, labels]).tolist())


def test_the_command_trains_well_above_chance_and_resumes_after_kill_9_to_the_same_parameters(audio_set, tmp_path):
    """`--task audio`: its own pipeline and model, every training and test sound each epoch, the headline its
    accuracy over sounds. Its clips and masks are DALI's random operators, whose state its checkpoints keep with the
    reader's position: the same run killed after a mid-epoch checkpoint (after step 2 of an epoch's 4) and resumed
    trains on the very same spectrograms (their fingerprints) and ends with the parameters of the run never killed."""
    common = ["--data-dir", str(audio_set), *TRAIN, "--epochs", str(EPOCHS), "--checkpoint-every-steps", "2"]
    common += ["--record-samples"]
    proc = dali_launch("train", *common, "--run-root", str(tmp_path / "whole"))
    check_ok(proc)
    whole = only_run(tmp_path / "whole")
    config = json.loads((whole.root / "config.json").read_text())
    assert (config["data"]["pipeline"], config["model"]["model"]) == ("audio", "audio-cnn")
    epochs = _epochs(whole)
    assert [(e["train_samples"], e["test_count"]) for e in epochs] == [(200, 40)] * EPOCHS
    assert epochs[-1]["test_accuracy"] >= BOUND, [e["test_accuracy"] for e in epochs]
    assert "(40 sounds)" in proc.stdout and f"done: test accuracy {epochs[-1]['test_accuracy']:.4f}" in proc.stdout

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
    for epoch in range(EPOCHS):
        assert seen_prints(cut, epoch) == seen_prints(whole, epoch), epoch


STOPPER = """
import os
import signal

import jax

from dali_launch.trainer.model.audio_cnn import AudioCNN

_seen = {"calls": 0}


def _stop(x):
    # SIGTERM to process 0 at a fixed call of its model: every rank agrees at the next sync point, checkpoints, stops.
    _seen["calls"] += 1
    if jax.process_index() == 0 and _seen["calls"] == int(os.environ.get("STOP_AT", "0")):
        os.kill(os.getpid(), signal.SIGTERM)


class Stopping(AudioCNN):
    def __call__(self, x):
        jax.debug.callback(_stop, x[0, 0, 0, 0])
        return super().__call__(x)
"""


@pytest.mark.multiprocess
def test_the_api_on_two_processes_sharded_stops_mid_epoch_and_resumes_on_one_device(audio_set, tmp_path, monkeypatch):
    """Executor("local"): 2 processes × 1 device, the state split over both (--mesh data:1,fsdp:2), the audio
    reader's shards (100 sounds each, 10 a step) through the pipeline as it evaluates (no random clip or mask), so
    each sound's fingerprint is known. Stopped by SIGTERM in epoch 0 (process 0's model's 6th call: a checkpoint at
    the next sync point), then `dali-launch --resume` on one device: each epoch, the interrupted one too, trains on
    every sound exactly once over both processes and both segments."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "stopper.py").write_text(STOPPER)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))  # the launcher here checks the model, the tasks train it
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'pkg'}:{REPO / 'tests'}")
    monkeypatch.setenv("STOP_AT", "6")
    executor = Executor("local", run_root=tmp_path / "runs", processes=2, gpus_per_node=2, init_timeout_s=60)
    job = executor.submit(
        data_dir=audio_set,
        task="audio",
        pipeline="unaugmented_pipelines:audio",
        model="stopper:Stopping",
        mesh="data:1,fsdp:2",
        **SOUNDS,
        **{"global_batch_size": 20, "epochs": 2, "record_samples": True, "sync_every_steps": 1},
    )
    state = job.wait(timeout_s=600)
    paths = RunPaths(job.run_dir)
    assert state == "interrupted" and not paths.result.exists(), (state, job.logs(0)[-2000:])
    assert json.loads(paths.rank_map.read_text())[0]["resolved"]["mesh"] == "fsdp:2"
    one = ["--gpus-per-node", "1", "--processes", "1", "--mesh", "auto"]
    resumed = dali_launch("--resume", str(paths.root), *one, env={"STOP_AT": "0"})
    check_ok(resumed)
    assert "2 -> 1 devices" in resumed.stdout, resumed.stdout
    expected = _reference_prints(audio_set / "training")
    assert sum(expected.values()) == len(expected) == 200
    for epoch in range(2):
        assert seen_prints(paths, epoch) == expected, epoch
    epochs = _epochs(paths)
    assert [(e["epoch"], e["train_samples"], e["test_count"]) for e in epochs] == [(0, 200, 40), (1, 200, 40)]
