"""Sounds, without training: each kind of file read from its header and its end (trainer/data/sounds.py), the
audio format found and listed as DALI's reader lists it, `--pipeline audio`'s spectrograms (their shape, their
masks, evaluation's determinism, channels kept), the ViTs on them, and `data synth --format audio`'s rhythms,
whose class a bag of frames cannot hear while their order over time tells it."""

from __future__ import annotations

import io
import shutil
from dataclasses import replace

import numpy as np
import pytest
import soundfile
from nvidia.dali import pipeline_def

from dali_launch.launcher.data import audio_check, data_check, synth_sounds
from dali_launch.launcher.data.synth import SynthSpec, synth
from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import formats, records, sounds, spectrograms
from dali_launch.trainer.data.audio import audio
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.errors import UsageError

TONE = 0.3 * np.sin(2 * np.pi * 440 * np.arange(4000) / 8000)  # half a second at 8 kHz
SMALL = {"sample_rate": 8000, "clip_seconds": 0.64, "mel_bins": 32}


def _encoded(kind: str, subtype: str, channels: int = 1) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, np.stack([TONE] * channels, -1), 8000, format=kind, subtype=subtype)
    return out.getvalue()


@pytest.mark.parametrize(
    "kind, subtype, name, said",
    [
        ("WAV", "PCM_16", "WAV", "is a truncated WAV (its data chunk announces 8,000 bytes, 3,978 follow)"),
        ("FLAC", "PCM_16", "FLAC", "is a truncated FLAC (its last frame does not end the file)"),
        ("OGG", "VORBIS", "Ogg", "is a truncated Ogg stream (its last page does not end the file)"),
        ("OGG", "OPUS", "Ogg", "is a truncated Ogg stream (its last page does not end the file)"),
    ],
)
def test_a_sound_is_read_from_its_header_and_its_end(tmp_path, kind, subtype, name, said):
    """Its kind, channels and rate from the header; cut short (as a copy that stopped), one line saying so: DALI 2.4
    fails a whole pipeline on a cut FLAC or Ogg without naming the file, and reads half of a cut WAV silently."""
    path = tmp_path / f"sound.{kind.lower()}"
    path.write_bytes(_encoded(kind, subtype, channels=2))
    assert sounds.read(str(path)) == sounds.Sound(name, 2, 8000)  # Opus: the rate it was made at
    data = _encoded(kind, subtype)
    path.write_bytes(data[: len(data) // 2])
    assert sounds.check_file(str(path)) == said


def test_what_is_no_sound_is_said_so(tmp_path):
    path = tmp_path / "x.wav"
    path.write_text("not a sound\n")
    assert sounds.check_file(str(path)) == "is not a WAV, FLAC or Ogg sound (the formats DALI's audio decoder reads)"
    path.write_bytes(b"")
    assert sounds.check_file(str(path)) == "is empty"
    assert sounds.check_file(str(tmp_path / "gone.wav")) == "cannot be read (No such file or directory)"


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    """`data synth --format audio`: 2 classes of 6 training / 2 test sounds, a FLAC and an Ogg added to training."""
    root = tmp_path_factory.mktemp("sounds") / "data"
    synth(SynthSpec(root, "audio", classes=2, train=6, test=2, workers=1))
    (root / "training" / "0" / "extra.flac").write_bytes(_encoded("FLAC", "PCM_16"))
    (root / "training" / "1" / "extra.ogg").write_bytes(_encoded("OGG", "VORBIS"))
    return root


def _run(split, training: bool, seed: int = 0, **settings):
    """One batch of the whole split through --pipeline audio on the CPU: (spectrograms, labels) as numpy."""
    args = PipelineArgs(str(split), 0, 1, 8, training, False, "cpu", seed, 2, 32, **{**SMALL, **settings})
    pipe = pipeline_def(lambda: tuple(audio(args)), batch_size=8, num_threads=1, device_id=None, seed=seed)()
    pipe.build()
    return tuple(np.array(out.as_tensor()) for out in pipe.run())


def test_the_pipeline_gives_log_mel_spectrograms_of_the_settings_shape(small_set):
    """Every sound of the split (WAVs of three rates, a FLAC, an Ogg) as (mel bins, frames, 1), its class: the same
    in evaluation every time (a centred clip), masked bands of zeros in training, which draws anew with its seed."""
    split = small_set / "training"
    shape = spectrograms.of(DataConfig(**SMALL)).shape
    assert shape == (32, 64, 1) and spectrograms.of(DataConfig(**SMALL)).clip_samples == 63 * 80
    evaluated, labels = _run(split, training=False)
    assert evaluated.shape == (8, *shape) and evaluated.dtype == np.float32
    assert labels.ravel().tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # three WAVs and the FLAC, three and the Ogg
    assert np.allclose(evaluated.mean(axis=(1, 2, 3)), 0, atol=1e-4)  # normalised per sample
    assert np.array_equal(_run(split, training=False)[0], evaluated)
    trained = _run(split, training=True)[0]
    masked = (trained == 0).all(axis=(1, 3)).any(axis=1) | (trained == 0).all(axis=(2, 3)).any(axis=1)
    assert masked.all() and not np.array_equal(_run(split, training=True, seed=1)[0], trained)


def test_audio_channels_keep_each_channel_and_refuse_another_count(tmp_path):
    """--audio-channels 2: a spectrogram a channel (a sound panned left differs between them); the launcher's
    check refuses a mono sound among them."""
    for name, left in (("0/a.flac", 1.0), ("1/b.flac", 0.2)):
        (tmp_path / "training" / name).parent.mkdir(parents=True)
        soundfile.write(tmp_path / "training" / name, np.stack([TONE * left, TONE * (1 - left)], -1), 8000)
    shutil.copytree(tmp_path / "training", tmp_path / "testing")
    spectrogram, _ = _run(tmp_path / "training", training=False, audio_channels=2)
    assert spectrogram.shape[1:] == (32, 64, 2) and not np.allclose(spectrogram[0, ..., 0], spectrogram[0, ..., 1])
    audio_check.check_channels(tmp_path, DataConfig(audio_channels=2))
    soundfile.write(tmp_path / "testing" / "1" / "c.wav", TONE, 8000)
    with pytest.raises(UsageError, match=r"testing/1/c.wav has 1 channel, but --audio-channels 2 keeps 2"):
        audio_check.check_channels(tmp_path, DataConfig(audio_channels=2))
    audio_check.check_channels(tmp_path, DataConfig(audio_channels=0))  # downmixed: any count


def test_the_format_is_found_listed_and_read_as_dali_reads_it(small_set, synth_sets):
    """Class folders of sounds are the audio format (image folders stay folders); its records are the sounds alone,
    in the reader's order, for --sample-order global and the bad-sample screen."""
    split = small_set / "training"
    (split / "0" / "notes.txt").write_text("not listed")
    assert formats.detect(split).name == "audio" and data_check.format_of(small_set).name == "audio"
    assert formats.detect(synth_sets["folders"] / "training").name == "folders"
    source = records.open_source("file", formats.get("audio").reader_arguments(split))
    names = [name for name, _ in source.files]
    assert len(source) == 8 and names[3] == "0/extra.flac" and names[-1] == "1/extra.ogg"
    assert source.read(3)[0].tobytes()[:4] == b"fLaC" and source.read(7)[1] == 1
    assert data_check.check(small_set, decode=False, say=lambda line: None) == 0


def test_the_vits_take_spectrograms_whose_sides_their_patches_tile():
    """vit-ti16 on 32 mel bins × 64 frames: 2 × 4 patches, logits a class each; 100 frames are refused before any
    job with the settings that tile (launcher/route/audio_checks.py)."""
    import jax
    import jax.numpy as jnp

    from dali_launch.trainer.model import vit
    from dali_launch.trainer.model.registry import create_model

    model = create_model("vit-ti16", 4)
    x = jnp.zeros((1, *spectrograms.of(DataConfig(**SMALL)).shape))
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x))
    assert jax.eval_shape(model.apply, params, x).shape == (1, 4)
    audio_run = DataConfig(pipeline="audio", **SMALL)
    assert vit.tokens(spectrograms.input_sides(audio_run), "gap") == 8 and spectrograms.input_sides(DataConfig()) == (
        224,
        224,
    )
    assert spectrograms.vit_problem(audio_run, "vit-ti16") is None
    assert "e.g. --mel-bins 64 --clip-seconds 0.96" in spectrograms.vit_problem(
        replace(audio_run, mel_bins=60, clip_seconds=1.0), "vit-ti16"
    )


def test_the_synthetic_rhythms_hide_their_class_from_a_bag_of_frames(audio_set):
    """Every class strikes as many clicks, drawn alike: time-averaged spectra (a bag of frames) score near chance
    (0.25) on the test sounds, while the loudness's autocorrelation over 10-390 ms, the rhythm, scores well above."""
    assert synth_sounds.MAX_CLASSES == 10 and len(set(synth_sounds.PATTERNS)) == 10
    (train, train_labels), (test, test_labels) = (
        _run_all(audio_set / split, count) for split, count in (("training", 200), ("testing", 40))
    )

    def accuracy(features) -> float:
        """A ridge classifier's test accuracy on features of the training sounds."""
        fit, check = features(train), features(test)
        mean, std = fit.mean(0), fit.std(0) + 1e-6
        fit, check = (fit - mean) / std, (check - mean) / std
        weights = np.linalg.solve(fit.T @ fit + 10 * np.eye(fit.shape[1]), fit.T @ np.eye(4)[train_labels])
        return float((np.argmax(check @ weights, 1) == test_labels).mean())

    def rhythm(x):
        loudness = x.mean(1) - x.mean(axis=(1, 2))[:, None]
        return np.stack([(loudness[:, :-k] * loudness[:, k:]).mean(1) for k in range(1, 40)], 1)

    assert accuracy(lambda x: x.mean(2)) <= 0.4 < 0.6 <= accuracy(rhythm)


def _run_all(split, count: int):
    """Every sound of the split as the run's defaults see it (16 kHz, 1 s, 64 mel bins), its class."""
    args = PipelineArgs(str(split), 0, 1, count, False, False, "cpu", 0, 4, 32)
    pipe = pipeline_def(lambda: tuple(audio(args)), batch_size=count, num_threads=2, device_id=None)()
    pipe.build()
    spectrograms_, labels = (np.array(out.as_tensor()) for out in pipe.run())
    return spectrograms_[..., 0], labels.ravel()


def test_data_check_decode_finds_a_sound_whose_inside_is_corrupt(small_set, tmp_path):
    """A WAV whose header parses and whose size is right but whose format DALI's decoder refuses: the scan passes
    it, `data check --decode` decodes every sound with DALI and names it."""
    data = tmp_path / "data"
    shutil.copytree(small_set, data)
    wav = data / "testing" / "1" / "00000001.wav"
    spoilt = bytearray(wav.read_bytes())
    spoilt[20:22] = (0x7777).to_bytes(2, "little")  # the fmt chunk's format tag: no such format
    wav.write_bytes(bytes(spoilt))
    said = []
    assert data_check.check(data, decode=False, say=said.append) == 0
    assert data_check.check(data, decode=True, say=said.append) == 1
    assert (
        f"{wav} does not decode (Failed to open encoded data: Error in WAV/W64/RF64 file. Malformed 'fmt ' chunk.)"
        in said
    )
