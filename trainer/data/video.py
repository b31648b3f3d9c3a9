"""`--pipeline video`: clips of --clip-frames frames from video files, for `--task video`.

Why DALI's `fn.experimental.readers.video`: it reads and decodes in one operator, on the CPU (FFmpeg's
libavcodec: VP8, VP9, MJPEG) and on GPUs (`device="gpu"`: NVDEC, also H.264, HEVC, AV1), takes `shard_id`,
`num_shards`, `pad_last_batch` and `stick_to_shard` as every reader (each clip once an epoch over the job,
measured with 3 shards of 8 clips), and keeps its position and shuffle in DALI's checkpoints, so a run resumes
mid-epoch on the same clips. Its siblings cannot: `fn.readers.video` is GPU-only ("not registered for cpu"),
and `fn.decoders.video` behind a file reader refuses `enable_checkpointing` ("Checkpointing is not implemented
for this operator", DALI 2.4.0), which every pipeline here is built with.

A sample is a clip file (`step` beyond any clip: one sequence each, from its first frame): the reader decodes
a window of W frames --clip-stride apart, W the fewest a clip of the split has (at most WINDOW × --clip-frames,
so a long clip costs at most that), and

training    one random run of T = --clip-frames consecutive frames of the window (a random start), one random
            window of the frame (each side 50-100 %) and one coin's flip, the same for every frame of the clip
evaluation  --eval-clips runs of T frames evenly spaced over the window (first to last), whole frames: a sample
            is (clips, T, H, W, 3), the task averaging its clips' logits per video
both        --image-size square frames, RGB, ImageNet mean/std, args.dtype(); labels class ids

Every random draw is one of DALI's random operators, whose state its checkpoints keep. The split is screened
first (--bad-samples: a clip FFmpeg cannot read, or one of a codec DALI cannot decode, is named in one line)
and its clips' frame counts read from their containers (records/videos.py, cached).
"""

from __future__ import annotations

from nvidia.dali import fn, types

from dali_launch.trainer.data import bad_samples, formats
from dali_launch.trainer.data.contract import Pipeline, PipelineArgs
from dali_launch.trainer.data.pipelines import MEAN, STD
from dali_launch.trainer.data.records import videos
from dali_launch.trainer.data.segmentation import random_window

READER = "video"  # formats.py's reader name for it, and the reader's name in the pipeline
STEP = 1 << 30  # frames between two sequences of one clip: beyond any clip, so one sequence a clip
WINDOW = 4  # the decoded window is at most this many clips long


def _video(args: PipelineArgs):
    kwargs, window = screened(args)
    frames, labels = reader(kwargs, window, args)
    clips = training(frames, window, args) if args.training else evaluation(frames, window, args)
    labels = fn.reshape(labels, shape=[])
    return clips, labels.gpu() if args.on_gpu and labels.device == "cpu" else labels


def reader(kwargs: dict, window: int, args: PipelineArgs):
    """(frames, labels): `window` frames --clip-stride apart from the start of each clip of this device's shard,
    decoded where the pipeline runs (NVDEC on a GPU)."""
    return fn.experimental.readers.video(
        device="gpu" if args.on_gpu else "cpu",
        **videos.reader_kwargs(kwargs),
        sequence_length=window,
        stride=args.clip_stride,
        step=STEP,
        **args.reader_args(),
        name=READER,
    )


def screened(args: PipelineArgs) -> tuple[dict, int]:
    """The split's reader arguments, its bad clips refused or left out (--bad-samples), and the window of
    frames each clip is read with; a clip too short for --clip-frames refused in one line."""
    kwargs = formats.get(READER).reader_arguments(args.path)
    kwargs, left_out = bad_samples.screen(READER, kwargs, args.bad_samples, args.max_bad_samples)
    if left_out:
        args.left_out.append(left_out)
    return kwargs, videos.window_of(kwargs, args.clip_frames, args.clip_stride, WINDOW)


def training(frames, window: int, args: PipelineArgs):
    """A random run of T frames, then one random window and flip for all of them."""
    starts = list(range(window - args.clip_frames + 1))
    start = fn.cast(fn.random.uniform(values=[float(s) for s in starts]), dtype=types.INT32)
    clip = fn.slice(frames, start=fn.stack(start), shape=[args.clip_frames], axes=[0])
    size = [args.image_size] * 2
    clip = fn.resize(clip, size=size, interp_type=types.INTERP_LINEAR, **random_window())
    mirror = fn.random.coin_flip(probability=0.5)
    return fn.crop_mirror_normalize(clip, dtype=args.dtype(), mean=MEAN, std=STD, mirror=mirror, output_layout="FHWC")


def evaluation(frames, window: int, args: PipelineArgs):
    """--eval-clips runs of T frames, evenly spaced from the window's first frame to its last."""
    frames = fn.resize(frames, size=[args.image_size] * 2, interp_type=types.INTERP_LINEAR)
    frames = fn.crop_mirror_normalize(frames, dtype=args.dtype(), mean=MEAN, std=STD, output_layout="FHWC")
    return fn.stack(*(fn.slice(frames, start=[s], shape=[args.clip_frames], axes=[0]) for s in starts(window, args)))


def starts(window: int, args: PipelineArgs) -> list[int]:
    """The first frame (of the window's) of each evaluation clip: evenly spaced, the first and the last run."""
    free, count = window - args.clip_frames, args.eval_clips
    return [round(k * free / (count - 1)) if count > 1 else free // 2 for k in range(count)]


video = Pipeline(_video)
