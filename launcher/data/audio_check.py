"""The audio format's checks before any job: class folders of sounds as fn.readers.file numbers them
(`check_audio`, the format's `check`), and, where a run keeps channels (--audio-channels N), every sound's channel
count (`check_channels`, its `fits`): DALI would fail the pipeline mid-epoch on the first sound of
another count, without naming it. Sounds that cannot be read at all are the bad-sample screen's
(trainer/data/sounds.py, bad_samples.py), which runs first. `data check --decode` decodes every sound with DALI's
own decoder (`decode_all`), for the rare file whose header and end are sound but whose inside is not.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import formats, records, sample_scan, sounds
from dali_launch.trainer.data.records import folders
from dali_launch.trainer.errors import UsageError

SPLITS = ("training", "testing")
MAKE = "dali-launch data synth DIR --format audio"


def check_audio(path: Path, origin: str, num_classes: int) -> None:
    """Both splits hold sounds in class folders, the same folders (labels are their sorted order, empty ones
    count), at most --num-classes of them."""
    classes = {split: sorted(p.name for p in (path / split).iterdir() if p.is_dir()) for split in SPLITS}
    for split in SPLITS:
        if not _sounds(path / split):
            raise UsageError(
                f"{path / split} holds no sounds in class folders ({split}/<class>/<sound>.wav, .flac or .ogg); "
                f"make such a set with `{MAKE}`"
            )
    if classes["training"] != classes["testing"]:
        raise UsageError(
            f"{path} has different class folders in training/ ({len(classes['training'])}) and "
            f"testing/ ({len(classes['testing'])}); give both the same ones (empty ones too) so labels match"
        )
    if len(classes["training"]) > num_classes:
        raise UsageError(
            f"{path} has {len(classes['training'])} classes but --num-classes is {num_classes}; "
            f"pass --num-classes {len(classes['training'])}"
        )


def check_channels(path: Path, data: DataConfig) -> None:
    """Under --audio-channels N every sound of both splits has N channels (headers read: a few µs a file);
    under 0 (downmix) any count will do."""
    if not data.audio_channels:
        return
    for split in SPLITS:
        files = _sounds(path / split)
        with ThreadPoolExecutor(max_workers=8) as pool:
            counts = list(pool.map(_channels, files))
        for file, count in zip(files, counts):
            if count is not None and count != data.audio_channels:
                raise UsageError(
                    f"{file} has {count} channel{'s' if count > 1 else ''}, but --audio-channels {data.audio_channels} "
                    f"keeps {data.audio_channels} of every sound; use --audio-channels 0 to downmix them all to mono, "
                    f"or give every sound {data.audio_channels}"
                )


def _sounds(split: Path) -> list[str]:
    """The split's sounds, in the reader's order."""
    source = folders.source(formats.get("audio").reader_arguments(split))
    return [str(split / name) for name, _ in source.files]


def _channels(file: str) -> int | None:
    """A sound's channels from its header; None where it cannot be read (the bad-sample screen says so)."""
    try:
        return sounds.read(file).channels
    except ValueError:
        return None


def decode_all(reader: str, kwargs: dict, scan: sample_scan.Scan) -> list[sample_scan.Bad]:
    """Every sound of a split decoded by `fn.decoders.audio` on the CPU, one at a time (a failure ends a DALI
    pipeline: the next sound gets a new one): those that fail, named as the scan names them."""
    source, pipe, bad = records.open_source(reader, kwargs), None, []
    for i in range(scan.count):
        pipe = pipe or _decoder()
        pipe.feed_input("encoded", [source.read(i)[0]])
        try:
            pipe.run()
        except Exception as e:  # DALI's error, whatever its kind: this sound does not decode
            said = [line.strip() for line in str(e).split("encountered:")[-1].splitlines() if line.strip()]
            bad.append(sample_scan.Bad(i, sample_scan.name_of(reader, kwargs, i), f"does not decode ({said[0]})"))
            pipe = None
    return bad


def _decoder():
    """A CPU pipeline that decodes one encoded sound fed to it (DALI: imported by `data check --decode` alone)."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(
        batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1, exec_async=False, exec_pipelined=False
    )
    def decode():
        sound, _ = fn.decoders.audio(fn.external_source(name="encoded", dtype=types.UINT8), dtype=types.FLOAT)
        return sound

    pipe = decode()
    pipe.build()
    return pipe
