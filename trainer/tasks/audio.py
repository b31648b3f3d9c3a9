"""`--task audio`: classification of sounds. The classification task as it is (tasks/classification.py: softmax
cross-entropy, top-1 accuracy, --label-smoothing, --mixup and --cutmix on the spectrograms), with what a run of
sounds should default to: `--pipeline audio` (log-mel spectrograms, data/audio.py) and `--model audio-cnn`
(model/audio_cnn.py), its test set counted in sounds."""

from __future__ import annotations

import dataclasses

from dali_launch.trainer.tasks.classification import classification


def audio(num_classes: int = 10, label_smoothing: float = 0.0, mixup: float = 0.0, cutmix: float = 0.0):
    task = classification(num_classes, label_smoothing, mixup, cutmix)
    return dataclasses.replace(task, pipeline="audio", model="audio-cnn", unit="sounds")
