"""The checks of a video data set (`--pipeline video`) before any job: its clips and labels, and its clips
against the run's --clip-frames and --clip-stride."""

from __future__ import annotations

from pathlib import Path

from dali_launch.trainer.data import bad_samples, formats
from dali_launch.trainer.data.records import videos
from dali_launch.trainer.errors import UsageError

SPLITS = ("training", "testing")


def check_videos(path: Path, origin: str, num_classes: int) -> None:
    """Both splits hold clips (class folders, the same in both, or a file list), their labels 0..num_classes-1."""
    found = formats.get("video")
    make = found.make.format(path="DIR")
    folders = {}
    for split in SPLITS:
        kwargs = found.reader_arguments(path / split)
        try:
            clips = videos.source(kwargs)
        except (OSError, ValueError) as e:
            raise UsageError(f"{path / split}: its clips cannot be listed ({e}); re-create it with `{make}`") from None
        if not len(clips):
            raise UsageError(
                f"{path / split} holds no clips ({', '.join(formats.VIDEO_EXT)}) in class folders or a "
                f"{formats.VIDEO_LIST}; make a data set with `{make}`"
            )
        _labels_checked(path / split, clips.labels, num_classes)
        if "file_root" in kwargs:
            folders[split] = sorted(p.name for p in (path / split).iterdir() if p.is_dir())
    if len(folders) == 2 and folders["training"] != folders["testing"]:
        raise UsageError(
            f"{path} has different class folders in training/ ({len(folders['training'])}) and testing/ "
            f"({len(folders['testing'])}); give both the same ones (empty ones too) so labels match"
        )


def _labels_checked(split: Path, labels: list[int], num_classes: int) -> None:
    if min(labels) < 0:
        raise UsageError(f"{split} has a clip of label {min(labels)}; labels are class ids from 0, fix its file list")
    if max(labels) >= num_classes:
        raise UsageError(
            f"{split} has a clip of class {max(labels)} but --num-classes is {num_classes}; "
            f"pass --num-classes {max(labels) + 1} or more"
        )


def check_clip_frames(path: Path, data) -> None:
    """Every clip of both splits long enough for a clip of --clip-frames frames --clip-stride apart (the clips
    the screen leaves out aside), else the one line naming the shortest (data/video.py's); a --clip-window that
    holds a clip."""
    if data.clip_frames < 1 or data.clip_stride < 1 or data.eval_clips < 1:
        raise UsageError(
            f"--clip-frames {data.clip_frames}, --clip-stride {data.clip_stride} and --eval-clips {data.eval_clips}: "
            f"each must be at least 1"
        )
    if data.clip_window and data.clip_window < data.clip_frames:
        raise UsageError(
            f"--clip-window {data.clip_window} holds fewer frames than a clip's --clip-frames {data.clip_frames}; "
            f"pass at least {data.clip_frames}, or 0 for 4 × --clip-frames"
        )
    for split in SPLITS:
        kwargs = formats.get("video").reader_arguments(path / split)
        kwargs, _ = bad_samples.screen("video", kwargs, data.bad_samples, data.max_bad_samples)
        videos.shortest(kwargs, data.clip_frames, data.clip_stride)
