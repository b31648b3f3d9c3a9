"""The data formats: one `Format` record each, and `FORMATS`; every per-format table is a lookup in it.

A format is what `--pipeline NAME` reads and everything that follows from it: how a split folder is
recognised, its reader (`fn.readers.<reader>`) and that reader's path arguments for a split, the module
of its record source and bad-sample listing (records/<module>.py), what the launcher says of it and how
the launcher checks and writes it. A new format is a record here, its records/ module, its pipeline
function, its launcher writer and checks, and their tests; nothing else names formats.

The launcher's parts (its checks, `data synth`'s writer) are named by "module:function" strings that
only the launcher imports (`imported`): the trainer never imports the launcher, and a string is no
import, while a table of writers kept in the launcher would be a second list of formats to keep in step
with this one. Heavy parts (DALI pipelines, record sources) are named the same way, so this module
imports nothing but the standard library: the launcher reads it before any job at no cost.

`reader_arguments(split)` is the one place a split becomes reader arguments: the built-in pipelines
(pipelines.py) read with them and the launcher's pre-flight screen (bad_samples.py) screens them, so
both see the same files.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Format:
    name: str  # --pipeline NAME
    reader: str  # DALI's fn.readers.<reader>, and args.read's first argument
    arguments: Callable[[str], dict]  # a split's folder -> the reader's path arguments (plain values)
    detect: Callable[[Path], bool]  # whether a split's folder holds this format
    records: str  # the module of its record source and bad-sample listing (records/<format>.py)
    pipeline: str  # the built-in pipeline function, "module:attribute"
    holds: str  # what a split holds, in a word or two: "LMDBs", "class folders", "shards"
    layout: str  # the same with what makes it, for messages ("LMDBs (as ... makes them)")
    description: str  # one line for --help
    make: str  # the command that makes a data set of it at {path}
    check: str  # the launcher's checks of a data set of it, "module:function(path, origin, num_classes)"
    suffix: str = ""  # a sharded format's shard files
    skips: bool = True  # --bad-samples skip can leave samples out of its reader (a file list or index)
    crops: bool = True  # its pipeline gives --image-size square RGB crops (HWC); else flat vectors
    # why --augment is refused for it ("{pipeline}": its name), or "" where its training pipeline applies --augment
    # to its crops (args.auto_augment)
    no_augment: str = ""

    @property
    def augments(self) -> bool:
        return not self.no_augment

    one_hot: bool = False  # its training labels are one-hot rows of --num-classes floats; else class ids
    default_data: bool = False  # a run may leave --data-dir out ($DALI_EXTRA_PATH, the embedded sample)
    writer: str = ""  # `data synth --format NAME`'s writer of one unit, "module:function"; "" for none
    detect_last: bool = False  # detection tries it after the others (any folder of folders is one)
    masks: bool = False  # its samples pair an image with a mask of class ids (a PNG): its pipeline gives `masks`
    outputs: tuple[str, ...] = ("images", "labels")  # what its pipeline returns, in order: what its task takes
    feeds: bool = True  # --sample-order global can feed its pipeline from records/ (an image and a class id each)
    decodes: bool = True  # its pipeline decodes through args.decode: --decoded-cache may keep its samples
    spectrogram: bool = (
        False  # its pipeline gives log-mel spectrograms (mel bins, frames, channels): data/spectrograms.py
    )
    fits: str = (
        ""  # the launcher's check of its samples against the run's [data] settings, "module:function(path, data)"
    )

    def reader_arguments(self, split: str | Path) -> dict:
        return self.arguments(str(split))

    def module(self):
        """records/<module>.py: its `source(kwargs)`, `listing(kwargs)` and `without(kwargs, scan)`."""
        return importlib.import_module(self.records)


def shard_files(split: str | Path, suffix: str) -> tuple[list[str], list[str]]:
    """A split's shard files (sorted: the sample order) and their DALI index files (same stem, .idx)."""
    files = sorted(Path(split).glob(f"*{suffix}"))
    return [str(f) for f in files], [str(f.with_suffix(".idx")) for f in files]


def _shards(suffix: str, files: str, indexes: str, **extra) -> Callable[[str], dict]:
    """A sharded split's arguments: its shard files and their indexes, under the reader's own names."""

    def arguments(split: str) -> dict:
        shards, idx = shard_files(split, suffix)
        return {files: shards, indexes: idx, **extra}

    return arguments


def _has(suffix: str) -> Callable[[Path], bool]:
    return lambda split: any(split.glob(f"*{suffix}"))


COCO_ANNOTATIONS = "annotations.json"  # a detection split's annotations, beside its images
WEBDATASET_EXT = ["jpg", "cls"]  # what data synth writes and --pipeline webdataset reads: the image, then its class
SEGMENTATION_EXT = ["jpg", "png"]  # --pipeline segmentation's: the image, then its mask
VIDEO_EXT = (".webm", ".mkv", ".avi", ".mp4", ".mov")  # clips.EXTENSIONS: a class folder of these holds clips
VIDEO_LIST = "file_list.txt"  # records/videos.py's FILE_LIST: a split's clips as `NAME LABEL` lines


def _videos(split: str) -> dict:
    """A split of clips: its file list where it has one, else its class folders."""
    listed = Path(split) / VIDEO_LIST
    return {"file_list": str(listed)} if listed.is_file() else {"file_root": split}


def _has_videos(split: Path) -> bool:
    """A file list, or a class folder whose first file is a clip."""
    if (split / VIDEO_LIST).is_file():
        return True
    folder = next((p for p in sorted(split.iterdir()) if p.is_dir()), None)
    return folder is not None and any(f.suffix.lower() in VIDEO_EXT for f in folder.iterdir())


AUDIO_FILTERS = ["*.wav", "*.flac", "*.ogg"]  # the audio format's fn.readers.file `file_filters`: sounds alone
SOUND_SUFFIXES = tuple(pattern[1:] for pattern in AUDIO_FILTERS)


def _has_sounds(split: Path) -> bool:
    """Class folders whose first class folder with files starts with a sound (a look at a few names, not a walk)."""
    for folder in sorted(p for p in split.iterdir() if p.is_dir()):
        names = [entry.name.lower() for _, entry in zip(range(16), folder.iterdir())]
        if names:
            return any(name.endswith(SOUND_SUFFIXES) for name in names)
    return False


def _has_masks(split: Path) -> bool:
    """Tar shards whose first sample (its DALI index's first line) has a .png member: images with masks."""
    _, indexes = shard_files(split, ".tar")
    try:
        with open(indexes[0]) as index:
            index.readline()
            members = index.readline().split()
    except (IndexError, OSError):
        return False
    return SEGMENTATION_EXT[1] in members[0::4]


LAUNCHER = "dali_launch.launcher.data"
PIPELINES = "dali_launch.trainer.data.pipelines"
RECORDS = "dali_launch.trainer.data.records"
SYNTH = "dali_launch.launcher.data.synth"
FORMATS: tuple[Format, ...] = (
    Format(
        name="mnist",
        reader="caffe2",
        holds="LMDBs",
        arguments=lambda split: {"path": split},
        detect=lambda split: (split / "data.mdb").is_file(),
        records=f"{RECORDS}.caffe2",
        pipeline=f"{PIPELINES}:mnist",
        layout="LMDBs (as `dali-launch data prepare` makes them)",
        description="Caffe2 LMDBs of grey JPEG digits: flat 784 floats",
        make="dali-launch data prepare --from IDX_DIR --to {path}",
        check=f"{LAUNCHER}.datasets:check_lmdbs",
        skips=False,  # an LMDB has no index to leave a record out of: fn.readers.caffe2 reads every key
        crops=False,
        one_hot=True,
        default_data=True,
    ),
    Format(
        name="folders",
        reader="file",
        holds="class folders",
        arguments=lambda split: {"file_root": split},
        detect=lambda split: any(p.is_dir() for p in split.iterdir()),
        records=f"{RECORDS}.folders",
        pipeline=f"{PIPELINES}:folders",
        layout="folders of class folders of images (as `dali-launch data synth --format folders` makes them)",
        description="SPLIT/<class>/<n>.jpg",
        make="dali-launch data prepare --format folders --from IDX_DIR --to {path}",
        check=f"{LAUNCHER}.datasets:check_folders",
        writer=f"{SYNTH}:write_folders",
        detect_last=True,
    ),
    Format(
        name="tfrecord",
        reader="tfrecord",
        holds="shards",
        arguments=_shards(".tfrecord", "path", "index_path"),
        detect=_has(".tfrecord"),
        records=f"{RECORDS}.tfrecord",
        pipeline=f"{PIPELINES}:tfrecord",
        layout="folders of *.tfrecord shards with their DALI indexes (as `dali-launch data synth --format "
        "tfrecord` makes them)",
        description="SPLIT/shard-N.tfrecord of tf.Examples",
        make="dali-launch data synth {path} --format tfrecord",
        check=f"{LAUNCHER}.shard_checks:check_tfrecord",
        suffix=".tfrecord",
        writer=f"{SYNTH}:write_tfrecord",
    ),
    Format(
        name="webdataset",
        reader="webdataset",
        holds="shards",
        arguments=_shards(".tar", "paths", "index_paths", ext=WEBDATASET_EXT),
        detect=lambda split: _has(".tar")(split) and not _has_masks(split),
        records=f"{RECORDS}.webdataset",
        pipeline=f"{PIPELINES}:webdataset",
        layout="folders of *.tar shards with their DALI indexes (as `dali-launch data synth --format "
        "webdataset` makes them)",
        description="SPLIT/shard-N.tar (NAME.jpg + NAME.cls)",
        make="dali-launch data synth {path} --format webdataset",
        check=f"{LAUNCHER}.shard_checks:check_webdataset",
        suffix=".tar",
        writer=f"{SYNTH}:write_webdataset",
    ),
    Format(
        name="segmentation",
        reader="webdataset",  # the same reader and records as webdataset's, the second member a mask
        holds="shards of images with masks",
        arguments=_shards(".tar", "paths", "index_paths", ext=SEGMENTATION_EXT),
        detect=_has_masks,
        records=f"{RECORDS}.webdataset",
        pipeline="dali_launch.trainer.data.segmentation:segmentation",
        layout="folders of *.tar shards of images with masks, with their DALI indexes (as `dali-launch data synth "
        "--format segmentation` makes them)",
        description="SPLIT/shard-N.tar (NAME.jpg + NAME.png, the mask's class ids as grey levels)",
        make="dali-launch data synth {path} --format segmentation",
        check=f"{LAUNCHER}.shard_checks:check_segmentation",
        suffix=".tar",
        writer=f"{SYNTH}:write_segmentation",
        masks=True,
        outputs=("images", "masks"),  # --task segmentation's (tasks/segmentation.py)
        no_augment="moves and warps an image's pixels, not its masks: --pipeline {pipeline} takes none",
    ),
    Format(
        name="detection",
        reader="coco",
        holds="COCO annotations and images",
        arguments=lambda split: {"file_root": split, "annotations_file": f"{split}/{COCO_ANNOTATIONS}"},
        detect=lambda split: (split / COCO_ANNOTATIONS).is_file(),
        records=f"{RECORDS}.coco",
        pipeline=f"{PIPELINES}:detection",
        layout="folders of images beside a COCO annotations.json (as `dali-launch data synth --format detection` "
        "makes them)",
        description="SPLIT/annotations.json (COCO: boxes and class ids 0..N-1) beside SPLIT/<n>.jpg",
        make="dali-launch data synth {path} --format detection",
        check=f"{LAUNCHER}.coco_check:check_detection",
        writer=f"{LAUNCHER}.synth_boxes:write_detection",
        no_augment="moves and warps an image's pixels, not the boxes on them: --pipeline {pipeline} takes none",
        outputs=("images", "boxes", "classes", "counts"),  # --task detection's (tasks/detection.py)
        feeds=False,  # a sample is an image, its boxes and their classes: DALI's COCO reader reads them
    ),
    Format(
        name="video",
        reader="video",  # fn.experimental.readers.video: it reads and decodes (data/video.py says why)
        holds="class folders of clips",
        arguments=_videos,
        detect=_has_videos,
        records=f"{RECORDS}.videos",
        pipeline="dali_launch.trainer.data.video:video",
        layout="folders of class folders of clips, or of clips and a file_list.txt (as `dali-launch data synth "
        "--format video` makes them)",
        description="SPLIT/<class>/<n>.webm (VP9; MJPEG too; H.264 and HEVC on GPUs), or SPLIT/file_list.txt",
        make="dali-launch data synth {path} --format video",
        check=f"{LAUNCHER}.video_check:check_videos",
        writer=f"{LAUNCHER}.synth_clips:write_video",
        no_augment="moves and warps each image alone, not a clip's frames alike: --pipeline {pipeline} takes none",
        outputs=("clips", "labels"),  # --task video's (tasks/video.py)
        feeds=False,  # DALI's video reader decodes what it reads: no external source can feed it
        decodes=False,  # nor can --decoded-cache keep what it decodes
        fits=f"{LAUNCHER}.video_check:check_clip_frames",
    ),
    Format(
        name="audio",
        reader="file",  # the folders' reader and records, given `file_filters`: sounds, each checked as a sound
        holds="class folders of sounds",
        arguments=lambda split: {"file_root": split, "file_filters": AUDIO_FILTERS},
        detect=_has_sounds,
        records=f"{RECORDS}.folders",
        pipeline="dali_launch.trainer.data.audio:audio",
        layout="folders of class folders of sounds (as `dali-launch data synth --format audio` makes them)",
        description="SPLIT/<class>/<n>.wav (or .flac, .ogg), any sample rate",
        make="dali-launch data synth {path} --format audio",
        check=f"{LAUNCHER}.audio_check:check_audio",
        writer=f"{SYNTH}:write_audio",
        crops=False,
        no_augment="works on RGB crops; --pipeline {pipeline} gives spectrograms and masks their time and frequency "
        "itself in training",
        spectrogram=True,
        decodes=False,  # its own decoder (fn.decoders.audio): --decoded-cache keeps images alone
        fits=f"{LAUNCHER}.audio_check:check_channels",
    ),
)


@dataclass(frozen=True)
class Reading:
    """A built-in pipeline beside the formats' own: another reading of a format's splits, into other outputs
    than (images, labels), for a built-in task of its own (tasks/). Its data is that format's: checked,
    screened and counted as the format's own pipeline's (`get` gives the format)."""

    name: str  # --pipeline NAME
    reads: str  # the format whose splits it reads
    pipeline: str  # its function, "module:attribute"
    outputs: tuple[str, ...]  # what it gives, in order: the task taking them names the same
    crops: bool = True  # the model's input among them is --image-size square RGB crops (HWC)


READINGS: tuple[Reading, ...] = (
    Reading("views", "folders", "dali_launch.trainer.data.views:views", ("view1", "view2", "labels")),
)


def reading(name: str) -> Reading | None:
    """The built-in reading `--pipeline name` is, or None (a format's own pipeline, or the user's)."""
    return next((r for r in READINGS if r.name == name), None)


def names() -> list[str]:
    return [f.name for f in FORMATS]


def get(name: str) -> Format | None:
    """The format `--pipeline name` reads (a built-in reading: the format it reads); None for a pipeline of the
    user's own."""
    name = reading(name).reads if reading(name) else name
    return next((f for f in FORMATS if f.name == name), None)


def of_reader(reader: str) -> Format | None:
    """The format DALI's `fn.readers.<reader>` reads (the first: formats sharing a reader share its records
    module); None for a reader no format here has."""
    return next((f for f in FORMATS if f.reader == reader), None)


def readers() -> list[str]:
    return list(dict.fromkeys(f.reader for f in FORMATS))


def detect(split: Path) -> Format | None:
    """The format a split's folder holds, found by what it holds; None when none is recognised."""
    if not split.is_dir():
        return None
    ordered = [f for f in FORMATS if not f.detect_last] + [f for f in FORMATS if f.detect_last]
    return next((f for f in ordered if f.detect(split)), None)


def reader_of(name: str, split: str | Path) -> tuple[str, dict] | None:
    """(reader, its arguments) the built-in `--pipeline name` reads `split` with; None for one of the user's."""
    found = get(name)
    return None if found is None else (found.reader, found.reader_arguments(split))


def check_order(name: str, order: str) -> None:
    """--sample-order global feeds a pipeline an image and a class id a sample (data/feed.py): a built-in
    pipeline that reads more of each (the detection pipeline's boxes) is refused it in one line."""
    found = get(name)
    if order == "global" and found is not None and not found.feeds:
        from dali_launch.trainer.errors import UsageError

        raise UsageError(
            f"--sample-order global feeds a pipeline an image and a class id a sample, but --pipeline {name} reads "
            f"{found.holds} with DALI's own reader; use --sample-order shards"
        )


def imported(reference: str):
    """The function a "module:function" reference names, imported now."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)
