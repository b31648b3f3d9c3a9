"""`dali-launch data check DATA_DIR`: every bad sample of a data set, named, one line each.

The same pre-flight check a run makes (trainer/data/sample_scan.py: headers and last bytes, cached),
of both splits, in the format the folder holds; `--decode` also decodes every image with Pillow (every sound with
DALI's audio decoder), for the rare file whose header is sound but whose inside is not (DALI's decoder then fails a run without naming
the file). Exit code 1 when anything is bad, so a script can gate on it.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dali_launch.launcher.data import audio_check
from dali_launch.trainer.data import formats, records, sample_scan
from dali_launch.trainer.errors import UsageError

SPLITS = ("training", "testing")


def format_of(data_dir: Path) -> formats.Format:
    """Which format the folder holds (formats.detect), from what its training/ holds."""
    split = data_dir / "training"
    if not split.is_dir():
        raise UsageError(f"{data_dir} has no training/; point data check at the folder holding training/ and testing/")
    found = formats.detect(split)
    if found is None:
        holds = ", ".join(dict.fromkeys(f.holds for f in formats.FORMATS))
        raise UsageError(f"{split} holds none of {holds}; see `dali-launch data synth --help`")
    return found


def check(data_dir: Path, decode: bool, say=print) -> int:
    """Says each bad sample of both splits and a count; the exit code (1 if any)."""
    found, total = format_of(data_dir), 0
    for split in SPLITS:
        if not (data_dir / split).is_dir():
            continue
        reader = (found.reader, found.reader_arguments(data_dir / split))
        scan = sample_scan.scan_split(*reader)
        bad = list(scan.bad)
        if decode:
            flagged = {b.index for b in bad}
            decode_all = audio_check.decode_all if found.spectrogram else _decode_all  # sounds: DALI's decoder
            bad += [b for b in decode_all(*reader, scan) if b.index not in flagged]
        for b in sorted(bad, key=lambda b: b.index):
            say(b.line())
        say(f"{data_dir / split}: {scan.count} samples, {len(bad)} bad")
        total += len(bad)
    return 1 if total else 0


def _decode_all(reader: str, kwargs: dict, scan: sample_scan.Scan) -> list[sample_scan.Bad]:
    """Every sample decoded with Pillow (the header check passed them): those that fail, named as the scan names."""
    source = records.open_source(reader, kwargs)

    def decode(i: int) -> sample_scan.Bad | None:
        from PIL import Image

        try:
            Image.open(io.BytesIO(source.read(i)[0].tobytes())).load()
        except Exception as e:  # Pillow raises many kinds: each one is a sample DALI cannot decode either
            return sample_scan.Bad(i, sample_scan.name_of(reader, kwargs, i), f"does not decode ({e})")
        return None

    with ThreadPoolExecutor(max_workers=8) as pool:
        return [b for b in pool.map(decode, range(scan.count)) if b]
