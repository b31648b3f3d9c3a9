"""Synthetic sounds whose class is heard over time: the sounds behind `dali-launch data synth --format audio`.

A sound is a rhythm: a cycle of STEPS steps (about 40 ms each) repeated for the whole sound, CLICKS of its steps
struck. The class is which steps are struck, up to rotation (a sound starts anywhere in its cycle): one of the
MAX_CLASSES necklaces of CLICKS beads out of STEPS. Every class strikes the same number of clicks a second, each
click drawn alike whatever the class (a decaying tone of random pitch, 400-3,000 Hz, length and loudness), over
the same noise: the classes have the same energy and the same spectrum on average, so a model that averages
frames over time (a bag of frames) is at chance; one that sees the order of events over ~320 ms tells them apart.

Each sound also draws its tempo (±8 %), a little timing jitter per click, its length (1-1.5 s), its sample rate
(16, 22.05 or 32 kHz: runs resample them to --sample-rate) and, every fifth sound, two channels (panned: runs
downmix them). A sound is a pure function of (seed, split, index): the same bytes whichever worker writes it.
Written as 16-bit PCM WAV with the standard library's `wave`: no encoder to install.

Lengths and rates are those that a run's defaults (16 kHz, 1 s clips, 64 mel bins) see whole: every clip of 1 s
is all sound (three cycles of the rhythm), never padded with silence, and every sound fills the 8 kHz band the
mel bins span. Sounds of 0.6-1.2 s at 8-16 kHz (most shorter than a clip, padded with silence at -80 dB that the
per-sample normalisation then spreads the clicks against; a third with the top quarter of the bins empty) hid
their rhythm from the defaults: a ridge classifier of the loudness's autocorrelation scored 0.4 on them (0.75 on
these), and audio-cnn stayed under 0.5 test accuracy for 8 epochs where it reaches 1.0 on these in 4-5.
"""

from __future__ import annotations

import io
import itertools
import wave

import numpy as np

from dali_launch.launcher.data.synth_images import SPLIT_IDS

STEPS, CLICKS = 8, 4
STEP_S = 0.04
SAMPLE_RATES = (16000, 22050, 32000)
SECONDS = (1.0, 1.5)
PITCH_HZ = (400.0, 3000.0)  # under every rate's Nyquist frequency
NOISE = 0.02  # the noise floor's standard deviation; clicks peak at 0.5-1
HEADROOM = 0.7  # clicks that overlap stay under full scale


def patterns() -> list[tuple[int, ...]]:
    """Each class's struck steps: the necklaces (patterns up to rotation) of CLICKS of STEPS, each as its least
    rotation, in sorted order."""
    found = set()
    for steps in itertools.combinations(range(STEPS), CLICKS):
        rotations = [tuple(sorted((s - shift) % STEPS for s in steps)) for shift in range(STEPS)]
        found.add(min(rotations))
    return sorted(found)


PATTERNS = patterns()
MAX_CLASSES = len(PATTERNS)  # 10 for 4 clicks of 8 steps


def wav(seed: int, split: str, index: int, label: int) -> bytes:
    """The WAV file of one sound of class `label`."""
    rng = np.random.default_rng([seed, SPLIT_IDS[split], index, 1])
    rate = int(rng.choice(SAMPLE_RATES))
    signal = render(rng, label, rate)
    if index % 5 == 4:  # two channels, panned
        pan = float(rng.uniform(0.2, 0.8))
        signal = np.stack([signal * (1 - pan), signal * pan], axis=-1)
    pcm = (np.clip(signal * HEADROOM, -1, 1) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1 if signal.ndim == 1 else 2)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm.tobytes())
    return out.getvalue()


def render(rng: np.random.Generator, label: int, rate: int) -> np.ndarray:
    """One sound's samples at `rate`: class `label`'s rhythm from a random place in its cycle, over noise."""
    length = int(rng.uniform(*SECONDS) * rate)
    step = STEP_S * rng.uniform(0.92, 1.08)
    signal = rng.normal(0, NOISE, length)
    struck = PATTERNS[label]
    phase = float(rng.uniform(0, STEPS))  # where in the cycle the sound starts, in steps
    cycles = int(length / rate / (step * STEPS)) + 2
    for cycle, beat in itertools.product(range(cycles), struck):
        at = ((cycle * STEPS + beat - phase) * step + rng.normal(0, 0.003)) * rate
        if 0 <= at < length:
            _click(signal, int(at), rng, rate)
    return signal


def _click(signal: np.ndarray, at: int, rng: np.random.Generator, rate: int) -> None:
    """A decaying tone of random pitch, length and loudness added at sample `at`."""
    pitch = np.exp(rng.uniform(*np.log(PITCH_HZ)))
    decay_s = rng.uniform(0.006, 0.012)
    t = np.arange(min(len(signal) - at, int(5 * decay_s * rate))) / rate
    signal[at : at + len(t)] += rng.uniform(0.5, 1.0) * np.sin(2 * np.pi * pitch * t) * np.exp(-t / decay_s)
