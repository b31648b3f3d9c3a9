"""`--pipeline video`: clips of --clip-frames frames from video files, for `--task video`.

Why DALI's `fn.experimental.readers.video`: it reads and decodes in one operator, on the CPU (FFmpeg's
libavcodec: VP8, VP9, MJPEG) and on GPUs (`device="gpu"`: NVDEC, also H.264, HEVC, AV1), takes `shard_id`,
`num_shards`, `pad_last_batch` and `stick_to_shard` as every reader (each clip once an epoch over the job,
measured with 3 shards of 8 clips), and keeps its position and shuffle in DALI's checkpoints, so a run resumes
mid-epoch on the same clips. Its siblings cannot: `fn.readers.video` is GPU-only ("not registered for cpu"),
and `fn.decoders.video` behind a file reader refuses `enable_checkpointing` ("Checkpointing is not implemented
for this operator", DALI 2.4.0), which every pipeline here is built with.

A sample is a window of a clip in training and a whole clip (a video) in evaluation:

training    each clip cut into windows of W = --clip-window frames --clip-stride apart (clip_windows.py: 0 gives
            4 × T, at most the shortest clip's frames; several a long clip, each a sample once an epoch, listed
            to the reader as frame ranges), so a sample decodes W frames; in each, one random run of T =
            --clip-frames consecutive frames (a random start: over the epoch's windows, anywhere in the clip), one
            random window of the frame (each side 50-100 %) and one coin's flip, the same for every frame
evaluation  every test video read whole from its first frame (--clip-stride apart, padded to the split's longest
            with frames numbered -1), and --eval-clips runs of T frames evenly spaced from its first frame to its
            own last (DALI's arithmetic on the frames' numbers, per sample), whole frames: a sample is
            (clips, T, H, W, 3), the task averaging its clips' logits per video; it decodes the whole video
both        --image-size square frames, RGB, ImageNet mean/std, args.dtype(); labels class ids

Every random draw is one of DALI's random operators, whose state its checkpoints keep. The split is screened
first (--bad-samples: a clip FFmpeg cannot read, or one of a codec DALI cannot decode, is named in one line)
and its clips' frame counts read from their containers (records/videos.py, cached).
"""

from __future__ import annotations

from nvidia.dali import fn, types

from dali_launch.trainer.data import bad_samples, clip_windows, clips, formats
from dali_launch.trainer.data.contract import Pipeline, PipelineArgs
from dali_launch.trainer.data.pipelines import MEAN, STD
from dali_launch.trainer.data.records import videos
from dali_launch.trainer.data.segmentation import random_window

READER = "video"  # formats.py's reader name for it, and the reader's name in the pipeline
STEP = 1 << 30  # frames between two sequences of one listed range: beyond any clip, so one sequence a range


def _video(args: PipelineArgs):
    kwargs = screened(args)
    if args.training:
        frames, labels, window = windows(kwargs, args)
        clips_out = training(frames, window, args)
    else:
        frames, labels, numbers = whole(kwargs, args)
        clips_out = evaluation(frames, numbers, args)
    labels = fn.reshape(labels, shape=[])
    return clips_out, labels.gpu() if args.on_gpu and labels.device == "cpu" else labels


def screened(args: PipelineArgs) -> dict:
    """The split's reader arguments, its bad clips refused or left out (--bad-samples); a clip too short for
    --clip-frames refused in one line."""
    kwargs = formats.get(READER).reader_arguments(args.path)
    kwargs, left_out = bad_samples.screen(READER, kwargs, args.bad_samples, args.max_bad_samples)
    if left_out:
        args.left_out.append(left_out)
    videos.shortest(kwargs, args.clip_frames, args.clip_stride)
    return kwargs


def windows(kwargs: dict, args: PipelineArgs):
    """(frames, labels, W): the windows of W frames --clip-stride apart of this device's shard of the clips'
    windows, decoded where the pipeline runs (NVDEC on a GPU)."""
    found, counts = videos.source(kwargs), videos.frames(kwargs)
    window = clip_windows.window_of(
        args.clip_window, args.clip_frames, min(clips.strided(c, args.clip_stride) for c in counts)
    )
    listed = clip_windows.file_list(found.files, found.labels, counts, args.clip_frames, args.clip_stride, window)
    frames, labels = fn.experimental.readers.video(
        device="gpu" if args.on_gpu else "cpu",
        file_list=listed,
        file_list_format="frames",
        file_list_include_end=False,
        sequence_length=window,
        stride=args.clip_stride,
        step=STEP,
        pad_mode="edge",  # never used where the containers' frame counts are DALI's; else a window is kept whole
        **args.reader_args(),
        name=READER,
    )
    return frames, labels, window


def whole(kwargs: dict, args: PipelineArgs):
    """(frames, labels, numbers): each test video of this device's shard, every --clip-stride-th frame from its
    first, padded to the split's longest; `numbers` the frames' indices, -1 for padding."""
    longest = max(clips.strided(c, args.clip_stride) for c in videos.frames(kwargs))
    return fn.experimental.readers.video(
        device="gpu" if args.on_gpu else "cpu",
        **videos.reader_kwargs(kwargs),
        sequence_length=longest,
        stride=args.clip_stride,
        step=STEP,
        pad_mode="constant",
        enable_frame_num="sequence",
        **args.reader_args(),
        name=READER,
    )


def training(frames, window: int, args: PipelineArgs):
    """A random run of T frames of the window, then one random window and flip for all of them."""
    starts = list(range(window - args.clip_frames + 1))
    start = fn.cast(fn.random.uniform(values=[float(s) for s in starts]), dtype=types.INT32)
    clip = fn.slice(frames, start=fn.stack(start), shape=[args.clip_frames], axes=[0])
    size = [args.image_size] * 2
    clip = fn.resize(clip, size=size, interp_type=types.INTERP_LINEAR, **random_window())
    mirror = fn.random.coin_flip(probability=0.5)
    return fn.crop_mirror_normalize(clip, dtype=args.dtype(), mean=MEAN, std=STD, mirror=mirror, output_layout="FHWC")


def evaluation(frames, numbers, args: PipelineArgs):
    """--eval-clips runs of T frames, evenly spaced from each video's first frame to its last."""
    numbers = numbers.cpu() if numbers.device == "gpu" else numbers  # slice's start is read on the host
    free = fn.reductions.sum(fn.cast(numbers >= 0, dtype=types.INT32)) - args.clip_frames
    runs = []
    for first in starts(free, args.eval_clips):
        clip = fn.slice(frames, start=fn.stack(fn.cast(first, dtype=types.INT32)), shape=[args.clip_frames], axes=[0])
        clip = fn.resize(clip, size=[args.image_size] * 2, interp_type=types.INTERP_LINEAR)
        runs.append(fn.crop_mirror_normalize(clip, dtype=args.dtype(), mean=MEAN, std=STD, output_layout="FHWC"))
    return fn.stack(*runs)


def starts(free, count: int) -> list:
    """The first frame of each of `count` evaluation runs in a video of `free` + T frames: evenly spaced, the first
    and the last run, rounded half up (integer arithmetic: `free` may be a DALI node, one number a sample)."""
    if count == 1:
        return [free // 2]
    return [(2 * k * free + count - 1) // (2 * (count - 1)) for k in range(count)]


video = Pipeline(_video)
