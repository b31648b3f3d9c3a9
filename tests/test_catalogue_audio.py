"""The catalogue of bad inputs, sounds: the audio settings, what --pipeline audio cannot take, an audio data set
that is not one, a sound DALI cannot decode or one of another channel count than the run keeps, and `data synth
--format audio`'s classes. Each ends with one exact line on stderr and exit code 2, nothing written, nothing started
(catalogue.py says how an entry runs)."""

from __future__ import annotations

import pytest
from catalogue import broken_sample, check_entry, class_folders, synth_set

from dali_launch.launcher.data import synth_sounds

AUDIO = ["--pipeline", "audio"]
SKIP = "replace or remove it, or pass --bad-samples skip to train without it"
# Sample 2 of a `synth_set("audio")` (3 classes): its WAV's data chunk, and what is left of it cut by 200 bytes
ANNOUNCED = len(synth_sounds.wav(0, "training", 2, 2)) - 44

SETTINGS = [
    pytest.param(
        [*AUDIO, "--augment", "randaugment"],
        "--augment randaugment works on RGB crops; --pipeline audio gives spectrograms and masks their time and "
        "frequency itself in training; use --augment none",
        id="audio-augment",
    ),
    pytest.param(
        [*AUDIO, "--decoded-cache", "512"],
        "--decoded-cache 512 keeps what args.decode(...) decodes, and --pipeline audio decodes its samples itself; "
        "leave --decoded-cache out (auto: off there)",
        id="audio-decoded-cache-size",
    ),
    pytest.param(
        [*AUDIO, "--model", "vit-ti16"],
        "--model vit-ti16 cuts inputs into 16×16 patches, but --pipeline audio gives 64 mel bins × 100 frames; use "
        "multiples of 16, e.g. --mel-bins 64 --clip-seconds 0.96",
        id="audio-vit-patches",
    ),
    pytest.param(
        [*AUDIO, "--sample-rate", "500"],
        "--sample-rate 500 is too low for 25 ms windows of speech's mel scale; use 8000 or more",
        id="audio-sample-rate-low",
    ),
    pytest.param(
        [*AUDIO, "--clip-seconds", "0"],
        "--clip-seconds 0.0 is shorter than one 10 ms frame; use e.g. 1.0",
        id="audio-clip-empty",
    ),
    pytest.param(
        [*AUDIO, "--sample-rate", "8000", "--mel-bins", "200"],
        "--mel-bins 200 is out of range for 8000 Hz (256-point FFTs: 129 frequency bins); use 1 to 128, e.g. 64",
        id="audio-mel-bins-range",
    ),
    pytest.param(
        [*AUDIO, "--audio-channels", "-1"],
        "--audio-channels -1 must be 0 (downmix to mono) or the channels every sound has",
        id="audio-channels-negative",
    ),
]


@pytest.mark.parametrize("args, message", SETTINGS)
def test_settings(capsys, place, nothing_starts, args, message):
    """Pure checks: refused before the data is looked at."""
    check_entry(capsys, place, ["train", *args, "--data-dir", "{data}", "--run-root", "{root}"], message)


DATA = [
    pytest.param(
        AUDIO,
        "--pipeline audio needs --data-dir, a folder holding training/ and testing/ class folders of sounds; make one "
        "with `dali-launch data synth DIR --format audio`",
        None,
        id="audio-without-data-dir",
    ),
    pytest.param(
        [*AUDIO, "--data-dir", "{data}"],
        "{data}/training holds no sounds in class folders (training/<class>/<sound>.wav, .flac or .ogg); make such a "
        "set with `dali-launch data synth DIR --format audio`",
        class_folders(3),
        id="audio-on-image-folders",
    ),
    pytest.param(
        [*AUDIO, "--data-dir", "{data}", "--num-classes", "3", "--audio-channels", "1"],
        "{data}/training/1/00000004.wav has 2 channels, but --audio-channels 1 keeps 1 of every sound; use "
        "--audio-channels 0 to downmix them all to mono, or give every sound 1",
        synth_set("audio"),
        id="audio-channels-other-count",
    ),
    pytest.param(
        [*AUDIO, "--data-dir", "{data}", "--num-classes", "3"],
        "{data}/training/1/00000001.wav is not a WAV, FLAC or Ogg sound (the formats DALI's audio decoder reads); "
        f"{SKIP}",
        broken_sample("audio", "text"),
        id="audio-text-file-named-wav",
    ),
    pytest.param(
        [*AUDIO, "--data-dir", "{data}", "--num-classes", "3"],
        f"{{data}}/training/2/00000002.wav is a truncated WAV (its data chunk announces {ANNOUNCED:,} bytes, "
        f"{ANNOUNCED - 200:,} follow); {SKIP}",
        broken_sample("audio", "truncated", sample=2),
        id="audio-truncated-wav",
    ),
    pytest.param(
        ["--task", "audio", "--data-dir", "{data}", "--num-classes", "2"],
        "{data} has 3 classes but --num-classes is 2; pass --num-classes 3",
        synth_set("audio"),
        id="audio-more-than-num-classes",
    ),
]


@pytest.mark.parametrize("args, message, make", DATA)
def test_data(capsys, place, nothing_starts, args, message, make):
    check_entry(capsys, place, ["train", *args, "--run-root", "{root}"], message, make)


def test_synth_refuses_more_classes_than_it_has_rhythms(capsys, place, nothing_starts):
    check_entry(
        capsys,
        place,
        ["data", "synth", "{tmp}/out", "--format", "audio", "--classes", "11"],
        "--classes 11: a synthetic sound's class is one of 10 rhythms; use 2 to 10",
    )
