"""`dali-launch data synth`: a deterministic ImageNet-like data set, in the formats people store data in.

    dali-launch data synth /data/synth --format folders --train 50000 --test 5000 --classes 100
    dali-launch data synth /data/scenes --format segmentation --classes 4   # images with masks
    dali-launch data synth /data/clips --format video --classes 6 --image-scale 0.25   # VP9 clips (synth_clips.py)
    dali-launch data synth /data/sounds --format audio --classes 4   # rhythms of clicks (synth_sounds.py)

`OUT/training` and `OUT/testing`, images as synth_images.py draws them (scenes with masks: synth_scenes.py). The work is cut into shards of
`--shard-size` consecutive images, written by a pool of processes; each image depends only on (seed,
split, index), so the bytes do not depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from dali_launch.launcher.data import (
    new_dir,
    synth_clips,
    synth_images,
    synth_scenes,
    synth_sounds,
    tfrecord,
    webdataset,
)
from dali_launch.trainer.data import formats
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience.ending import die_with_parent

STOP_S = 0.5  # a worker's grace after SIGTERM before SIGKILL: Ctrl-C is answered within a second


def synth_formats() -> list[str]:
    """The formats `data synth` writes: those whose record names a writer here (formats.py)."""
    return [f.name for f in formats.FORMATS if f.writer]


@dataclass(frozen=True)
class SynthSpec:
    out: Path
    format: str = "folders"
    classes: int = 100
    train: int = 10_000
    test: int = 1_000
    seed: int = 0
    image_scale: float = 1.0  # image sides times this: 0.1 makes ~50×37 images for tests
    shard_size: int = 1024  # images per work unit, and per file of the sharded formats
    workers: int = 0  # 0: every core this process may use


@dataclass(frozen=True)
class Unit:
    """One shard of one split: images start..stop-1, written to folder/ by one worker."""

    spec: SynthSpec
    folder: Path
    split: str
    shard: int
    start: int
    stop: int


@dataclass(frozen=True)
class SynthReport:
    out: Path
    counts: dict[str, int]
    total_bytes: int
    seconds: float
    workers: int

    def line(self, spec: SynthSpec) -> str:
        images = sum(self.counts.values())
        counts = ", ".join(f"{name} {n:,}" for name, n in self.counts.items())
        file, samples = {"audio": ("WAV", "sounds"), "video": ("clip", "clips")}.get(spec.format, ("JPEG", "images"))
        return (
            f"wrote {self.out} ({spec.format}, {spec.classes} classes): {counts}; "
            f"{self.total_bytes / 1e6:,.1f} MB, {self.total_bytes / images / 1e3:.1f} KB per {file} on average; "
            f"{images / self.seconds:,.0f} {samples}/s with {self.workers} workers"
        )


def validate(spec: SynthSpec) -> None:
    if spec.format not in synth_formats():
        raise UsageError(f"--format {spec.format} is not one of {', '.join(synth_formats())}")
    for flag, value in (("--classes", spec.classes), ("--train", spec.train), ("--test", spec.test)):
        if value < 1:
            raise UsageError(f"{flag} {value}: a data set needs at least 1; use a positive count")
    if spec.format == "segmentation" and not 2 <= spec.classes <= synth_scenes.MAX_CLASSES:
        raise UsageError(
            f"--classes {spec.classes}: a segmentation set has the background (class 0) and at least one class "
            f"of objects, at most {synth_scenes.MAX_CLASSES} in all (8-bit masks); use 2 to {synth_scenes.MAX_CLASSES}"
        )
    if spec.format == "video" and spec.classes > synth_clips.MAX_CLASSES:
        raise UsageError(
            f"--classes {spec.classes}: a video set's classes are the {synth_clips.MAX_CLASSES} orders of its four "
            f"colours; use 2 to {synth_clips.MAX_CLASSES}"
        )
    if spec.format == "audio" and not 2 <= spec.classes <= synth_sounds.MAX_CLASSES:
        raise UsageError(
            f"--classes {spec.classes}: a synthetic sound's class is one of {synth_sounds.MAX_CLASSES} rhythms; use 2 to "
            f"{synth_sounds.MAX_CLASSES}"
        )
    if spec.train < spec.classes:
        raise UsageError(f"--train {spec.train} is fewer than --classes {spec.classes}; every class needs an image")
    if not 0 < spec.image_scale <= 1:
        raise UsageError(f"--image-scale {spec.image_scale} is out of range; use a value in (0, 1]")
    if spec.shard_size < 1 or spec.workers < 0:
        raise UsageError("--shard-size must be at least 1 and --workers at least 0 (0: every core)")
    new_dir.check_free(spec.out, "OUT")


def synth(spec: SynthSpec) -> SynthReport:
    validate(spec)
    workers = spec.workers or len(os.sched_getaffinity(0))
    counts = {"training": spec.train, "testing": spec.test}
    start = time.monotonic()
    with new_dir.building(spec.out) as tmp:
        units = [unit for split, n in counts.items() for unit in _units(spec, tmp / split, split, n)]
        for split in counts:
            (tmp / split).mkdir()
        total = sum(_run(units, workers))
    return SynthReport(spec.out, counts, total, time.monotonic() - start, workers)


def _units(spec: SynthSpec, folder: Path, split: str, count: int) -> list[Unit]:
    starts = range(0, count, spec.shard_size)
    return [Unit(spec, folder, split, k, s, min(s + spec.shard_size, count)) for k, s in enumerate(starts)]


def _run(units: list[Unit], workers: int) -> list[int]:
    if workers == 1 or len(units) == 1:
        return [write_unit(unit) for unit in units]
    # spawn, not fork: the caller may hold threads (DALI's, JAX's) that fork would copy half-alive.
    ours = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(
        min(workers, len(units)), mp_context=get_context("spawn"), initializer=_worker_starts, initargs=(os.getpid(),)
    )
    try:
        written = list(pool.map(write_unit, units))
    except BaseException:  # Ctrl-C, SIGTERM (new_dir.building), a worker's error: no worker writes on
        pool.shutdown(wait=False, cancel_futures=True)
        _stop([p for p in multiprocessing.active_children() if p not in ours])
        raise
    pool.shutdown()
    return written


def _worker_starts(parent_pid: int) -> None:
    """A worker ends with the command: Ctrl-C reaches every process of the terminal's group, but the
    parent alone answers it (and stops the workers: `_stop`); a parent killed outright takes them along."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid)


def _stop(procs: list) -> None:
    """Workers ended now, mid-image: what they wrote is removed with the temporary folder."""
    for proc in procs:
        proc.terminate()
    deadline = time.monotonic() + STOP_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(STOP_S)


def class_folder(label: int, classes: int) -> str:
    """Zero-padded, so fn.readers.file's sorted order (its labels) is the class id."""
    return f"{label:0{len(str(classes - 1))}d}"


def samples(unit: Unit):
    """(index, jpeg, label) of every image of a unit, in order."""
    spec = unit.spec
    for index in range(unit.start, unit.stop):
        label = synth_images.label_of(index, spec.classes)
        yield index, synth_images.jpeg(spec.seed, unit.split, index, label, spec.image_scale), label


def write_unit(unit: Unit) -> int:
    """Writes one unit's images with its format's writer (formats.py names it); returns the bytes of JPEG written."""
    return formats.imported(formats.get(unit.spec.format).writer)(unit)


def _stem(unit: Unit) -> Path:
    return unit.folder / f"shard-{unit.shard:05d}"


def write_tfrecord(unit: Unit) -> int:
    pairs = ((jpeg, label) for _, jpeg, label in samples(unit))
    return tfrecord.write(_stem(unit).with_suffix(tfrecord.SUFFIX), pairs)


def write_webdataset(unit: Unit) -> int:
    return webdataset.write(_stem(unit).with_suffix(webdataset.SUFFIX), samples(unit))


def write_segmentation(unit: Unit) -> int:
    """Each scene's JPEG and its mask's PNG, one WebDataset sample (formats.SEGMENTATION_EXT)."""
    spec = unit.spec
    scenes = (
        (index, *synth_scenes.scene(spec.seed, unit.split, index, spec.classes, spec.image_scale))
        for index in range(unit.start, unit.stop)
    )
    return webdataset.write(_stem(unit).with_suffix(webdataset.SUFFIX), scenes, formats.SEGMENTATION_EXT)


def write_audio(unit: Unit) -> int:
    """Each sound's WAV in its class folder (every class folder made, as write_folders does)."""
    spec, total = unit.spec, 0
    for label in range(spec.classes):
        (unit.folder / class_folder(label, spec.classes)).mkdir(exist_ok=True)
    for index in range(unit.start, unit.stop):
        label = synth_images.label_of(index, spec.classes)
        data = synth_sounds.wav(spec.seed, unit.split, index, label)
        (unit.folder / class_folder(label, spec.classes) / f"{index:08d}.wav").write_bytes(data)
        total += len(data)
    return total


def write_folders(unit: Unit) -> int:
    """Every class gets its folder (an empty one too: fn.readers.file numbers the folders), by whichever
    unit comes first: exist_ok, as units run in parallel."""
    for label in range(unit.spec.classes):
        (unit.folder / class_folder(label, unit.spec.classes)).mkdir(exist_ok=True)
    total = 0
    for index, data, label in samples(unit):
        (unit.folder / class_folder(label, unit.spec.classes) / f"{index:08d}.jpg").write_bytes(data)
        total += len(data)
    return total
