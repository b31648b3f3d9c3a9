"""`--pipeline audio`: class folders of sounds (WAV, FLAC, Ogg at any sample rate) as log-mel spectrograms.

It reads the audio format's splits (SPLIT/<class>/<file>.wav, as `dali-launch data synth --format audio` writes
them) through `args.read`, in either --sample-order, sounds that cannot be read screened as every built-in's
samples are. Each sound is decoded on the CPU (`fn.decoders.audio`: DALI has no GPU audio decoder), resampled to
--sample-rate as it is decoded and downmixed to mono (or, under --audio-channels N, its N channels kept); then,
on the GPU where DALI runs there (the spectrogram, mel filter bank and decibels are GPU operators too):
- one clip of --clip-seconds (spectrograms.py: (F - 1) hops for F frames), zeros past either end of a shorter
  sound: training: a random window (a shorter sound lands at a random place in it); evaluation: the centre;
- its power spectrogram (25 ms windows every 10 ms), --mel-bins mel filters, decibels down to 80 below the
  sound's peak, normalised to zero mean and unit variance per sample;
- training only: SpecAugment's masks, each at a random place of random width, drawn per sample by DALI's random
  operators (their state is in DALI's checkpoints: a resumed run draws the same): FREQUENCY_MASKS bands of up
  to FREQUENCY_MASK of the bins and TIME_MASKS spans of up to TIME_MASK of the frames, set to 0 (the mean).
Out: (mel bins, frames, channels) in args.dtype() as `images` (the model's input, as an image's H, W, C), and
class ids as `labels`: what --task classification and --task audio take.
"""

from __future__ import annotations

from nvidia.dali import fn, types

from dali_launch.trainer.data import spectrograms
from dali_launch.trainer.data.contract import Pipeline, PipelineArgs
from dali_launch.trainer.data.pipelines import inputs

FREQUENCY_MASKS, FREQUENCY_MASK = 2, 0.15  # SpecAugment's F and mF, as fractions of the bins (its LD: 27 of 80)
TIME_MASKS, TIME_MASK = 2, 0.1  # its T and mT, as fractions of the frames
CUTOFF_DB = -80.0


def _audio(args: PipelineArgs):
    encoded, labels = audio_inputs(args)
    labels = labels.gpu() if args.on_gpu else labels
    return log_mel(encoded, args), fn.reshape(labels, shape=[])


audio = Pipeline(_audio)  # --decoder auto on GPUs: mixed, the spectrograms made there; sounds decode on the CPU


def audio_inputs(args: PipelineArgs):
    """(encoded sounds, class ids) of one shard, through `args.read`."""
    return inputs(args, "audio")


def log_mel(encoded, args: PipelineArgs):
    """Each sound's (mel bins, frames, channels) log-mel spectrogram of one clip, as the module says."""
    shape = spectrograms.of(args)
    keep = args.audio_channels
    sound, _ = fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=not keep, sample_rate=shape.sample_rate)
    start = _clip_start(sound, shape.clip_samples, args.training)
    sound = sound.gpu() if args.on_gpu else sound
    clip = fn.slice(sound, start=start, shape=[shape.clip_samples], axes=[0], out_of_bounds_policy="pad")
    channels = [_channel(clip, c) for c in range(keep)] if keep else [clip]
    mels = fn.stack(*[_decibels(_mel(channel, shape)) for channel in channels], axis=2, axis_name="C")
    mels = fn.normalize(mels, epsilon=1e-6)  # per sample: every sound at one loudness
    if args.training:
        mels = _masked(_masked(mels, "f", FREQUENCY_MASKS, FREQUENCY_MASK), "t", TIME_MASKS, TIME_MASK)
    return fn.cast(mels, dtype=args.dtype())


def _clip_start(sound, samples: int, training: bool):
    """The clip's first sample: a uniform fraction (training; the centre, 0.5, in evaluation) of the sound's samples
    beyond the clip's, negative for a shorter sound (the slice pads it with zeros before and after)."""
    length = fn.cast(sound.shape(dtype=types.INT32)[0] - samples, dtype=types.FLOAT)
    where = fn.random.uniform(range=[0.0, 1.0]) if training else 0.5
    return fn.reshape(fn.cast(where * length, dtype=types.INT32), shape=[1])


def _channel(clip, channel: int):
    """One channel of a (samples, channels) clip, as the 1-D signal fn.spectrogram takes."""
    return fn.reshape(fn.slice(clip, start=[channel], shape=[1], axes=[1]), shape=[-1])


def _mel(signal, shape: spectrograms.Spectrogram):
    power = fn.spectrogram(
        signal, nfft=shape.nfft, window_length=shape.window, window_step=shape.hop, center_windows=True, layout="ft"
    )
    return fn.mel_filter_bank(power, sample_rate=shape.sample_rate, nfilter=shape.mel_bins)


def _decibels(mel):
    return fn.to_decibels(mel, multiplier=10.0, cutoff_db=CUTOFF_DB)  # against the sound's peak: no `reference`


def _masked(mels, axis: str, count: int, most: float):
    """`count` bands across `axis` (f or t), each of a random width up to `most` of it at a random place, set to 0."""
    width = fn.random.uniform(range=[0.0, most], shape=[count])
    anchor = fn.random.uniform(range=[0.0, 1.0], shape=[count]) * (1.0 - width)
    return fn.erase(mels, anchor=anchor, shape=width, axis_names=axis, normalized=True, fill_value=0.0)
