"""The log-mel spectrogram a run's audio settings make: window, hop and FFT at the sample rate, the clip's samples,
its frames, the shape the model sees. Pure arithmetic, no DALI: `--pipeline audio` (audio.py) builds with it, and
the launcher's checks and the expected first batch (expected.py) know the shape from it before any pipeline exists.

The windows are speech's usual 25 ms every 10 ms (400 and 160 samples at 16 kHz), the FFT the next power of two;
windows are centred on their frames (DALI's `center_windows`, the signal reflected at the ends), so a clip of
(F - 1) hops gives exactly F = --clip-seconds × 100 frames.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.data import formats

WINDOW_S = 0.025
HOP_S = 0.010
PATCH = 16  # the ViTs' patches (model/vit.py's PATCH): both sides of a spectrogram a ViT takes are multiples


@dataclass(frozen=True)
class Spectrogram:
    sample_rate: int  # Hz, every sound resampled to it
    frames: int  # the time axis, one frame a hop
    mel_bins: int  # the frequency axis
    channels: int  # 1 (downmixed) or the channels kept

    @property
    def window(self) -> int:
        return round(WINDOW_S * self.sample_rate)

    @property
    def hop(self) -> int:
        return max(1, round(HOP_S * self.sample_rate))

    @property
    def nfft(self) -> int:
        return 1 << max(1, self.window - 1).bit_length()

    @property
    def clip_samples(self) -> int:
        """The samples a clip is cropped or padded to: F frames of centred windows."""
        return (self.frames - 1) * self.hop

    @property
    def shape(self) -> tuple[int, int, int]:
        """One sample as the model sees it: (mel bins, frames, channels), an image's (H, W, C)."""
        return self.mel_bins, self.frames, self.channels


def of(settings) -> Spectrogram:
    """The spectrogram of `settings` (a DataConfig or a PipelineArgs: both name sample_rate, clip_seconds,
    mel_bins and audio_channels)."""
    frames = max(1, round(settings.clip_seconds / HOP_S))
    return Spectrogram(settings.sample_rate, frames, settings.mel_bins, settings.audio_channels or 1)


def input_sides(data) -> tuple[int, int]:
    """(height, width) of what the model sees under a DataConfig: a built-in pipeline of sounds' (mel bins, frames),
    else the --image-size square."""
    found = formats.get(data.pipeline)
    if found is not None and found.spectrogram:
        return of(data).shape[:2]
    return data.image_size, data.image_size


def problem(settings) -> str | None:
    """What is wrong with the audio settings, as the first half of a one-line message (None: nothing)."""
    if settings.sample_rate < 1000:
        return (
            f"--sample-rate {settings.sample_rate} is too low for 25 ms windows of speech's mel scale; use 8000 or more"
        )
    if not settings.clip_seconds >= HOP_S:
        return f"--clip-seconds {settings.clip_seconds} is shorter than one 10 ms frame; use e.g. 1.0"
    if settings.audio_channels < 0:
        return f"--audio-channels {settings.audio_channels} must be 0 (downmix to mono) or the channels every sound has"
    most = of(settings).nfft // 2
    if not 1 <= settings.mel_bins <= most:
        return (
            f"--mel-bins {settings.mel_bins} is out of range for {settings.sample_rate} Hz ({of(settings).nfft}-point "
            f"FFTs: {most + 1} frequency bins); use 1 to {most}, e.g. 64"
        )
    return None


def vit_problem(settings, model: str) -> str | None:
    """Why a ViT cannot cut the spectrogram into PATCH × PATCH patches, with the settings that would (None: it can)."""
    spectrogram = of(settings)
    if spectrogram.mel_bins % PATCH == 0 and spectrogram.frames % PATCH == 0:
        return None
    frames = max(PATCH, round(spectrogram.frames / PATCH) * PATCH)
    mels = max(PATCH, round(spectrogram.mel_bins / PATCH) * PATCH)
    return (
        f"--model {model} cuts inputs into {PATCH}×{PATCH} patches, but --pipeline audio gives {spectrogram.mel_bins} "
        f"mel bins × {spectrogram.frames} frames; use multiples of {PATCH}, e.g. --mel-bins {mels} --clip-seconds "
        f"{frames * HOP_S:g}"
    )
