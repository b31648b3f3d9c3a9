"""Bad samples: what `--bad-samples` does with a split's scan (sample_scan.py), and DALI's failure on one.

DALI's decoders fail the whole pipeline on one undecodable or truncated image without naming it
("nvImageCodec failure: '#4'"), and nvImageCodec may take the process down with it (a segfault: a text
file named .jpg, DALI 2.4). So before a reader is built, every sample of its split is checked
(sample_scan.py: headers and last bytes, cached by the split's fingerprint).

    --bad-samples stop   the first bad sample is one line naming it and what is wrong, before training
    --bad-samples skip   the bad samples are left out of the reader (its file list, or a copy of its
                         index without them: its format's `without`): every other sample is read exactly
                         once an epoch, and a resumed run reads the same set; past --max-bad-samples (a
                         count, or a fraction of the split: at least one sample) it stops as `stop` does

Both the launcher (before a job: the built-in pipelines' splits, formats.reader_of) and `args.read` inside
the trainer (a pipeline of the user's own too) screen a split here, alike. What a screen left out is its
return value, carried by the pipelines that read without it (batches.DeviceBatches.left_out): the epoch
line and RUN/bad_samples.jsonl say it from there. A format whose reader cannot leave a sample out (a
Caffe2 LMDB: `Format.skips`) can only stop; the launcher refuses `skip` for it before anything starts.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from dali_launch.trainer.data import formats, sample_scan
from dali_launch.trainer.data.sample_scan import Scan
from dali_launch.trainer.errors import UsageError


def screen(reader: str, kwargs: dict, mode: str, limit: str) -> tuple[dict, Scan | None]:
    """`kwargs` of `fn.readers.<reader>` as the split's bad samples leave them, and the scan of what they
    leave out (None: nothing): unchanged when it has none; a UsageError under `stop`, or past `limit`
    (--max-bad-samples); else without them (`skip`)."""
    if not sample_scan.scans(reader):
        return kwargs, None  # a reader of another format: DALI's own errors are all there is
    scan = sample_scan.scan_split(reader, kwargs)
    if not scan.bad:
        return kwargs, None
    first, more = scan.bad[0], len(scan.bad) - 1
    others = f" (and {more} more: `dali-launch data check {Path(scan.split).parent}` lists them)" if more else ""
    found = formats.of_reader(reader)
    if mode != "skip" and not found.skips:  # skip is no way out for it
        raise UsageError(
            f"{first.line()}{others}; re-create the data set without it (`{found.make.format(path='DIR')}`)"
        )
    if mode != "skip":
        raise UsageError(
            f"{first.line()}{others}; replace or remove it, or pass --bad-samples skip to train without it"
        )
    if len(scan.bad) > allowed(limit, scan.count):
        raise UsageError(
            f"{len(scan.bad)} of the {scan.count} samples of {scan.split} are bad (the first: {first.line()}), "
            f"more than --max-bad-samples {limit} allows; replace them, or raise --max-bad-samples"
        )
    if not found.skips:
        raise UsageError(f"{first.line()}{others}; {cannot_skip(found)}")
    return found.module().without(kwargs, scan), scan


def samples_read(reader: str, kwargs: dict, data) -> int:
    """The samples `fn.readers.<reader>(**kwargs)` reads once the split is screened under `data`'s
    --bad-samples (a DataConfig): every one, less those `skip` leaves out."""
    scan = sample_scan.scan_split(reader, kwargs)  # listed once: a clean split's screen has nothing more to say
    if scan.bad:
        screen(reader, kwargs, data.bad_samples, data.max_bad_samples)  # refused under stop, or past the limit
    return scan.count - len(scan.bad)


def cannot_skip(found: formats.Format) -> str:
    """Why --bad-samples skip cannot leave a sample of `found` out, and the fix."""
    return (
        f"--bad-samples skip cannot leave a sample out of {found.holds} (fn.readers.{found.reader} reads every record: "
        f"they have no index to leave one out of); re-create the data set without the bad samples "
        f"(`{found.make.format(path='DIR')}`), or use --bad-samples stop"
    )


def allowed(limit: str, count: int) -> int:
    """--max-bad-samples as a count of this split: a count, or a fraction below 1 of its samples, at least one
    for any fraction above 0 (the default 0.001 of a split under 1,000 samples would otherwise allow none,
    which is what 0 says, and `--bad-samples skip` would refuse a small set's one bad file)."""
    value = float(limit)
    if value >= 1:
        return int(value)
    return max(1, int(value * count)) if value > 0 else 0


def check_limit(limit: str) -> None:
    """--max-bad-samples, checked before anything is written."""
    try:
        value = float(limit)
    except ValueError:
        value = -1.0
    if not (0 <= value < 1 or (value >= 1 and value.is_integer())):
        raise UsageError(
            f"--max-bad-samples {limit} is neither a fraction of the split (0 to 1) nor a count; write e.g. 0.001 or 10"
        )


def check_mode(mode: str, pipeline: str) -> None:
    """--bad-samples skip on a built-in format whose reader cannot leave a sample out: refused before
    anything starts, rather than stopping at the first bad sample as `stop` would."""
    found = formats.get(pipeline)
    if mode == "skip" and found is not None and not found.skips:
        raise UsageError(cannot_skip(found))


def decode_failure(error: Exception, split: str) -> UsageError | None:
    """A pipeline's failure on a sample that passed the header check (corrupt inside), as one line; None
    for any other error. DALI names the sample by its source (a file under the split, a shard and offset)."""
    text = str(error)
    if "nvImageCodec" not in text and "fn.decoders." not in text:
        return None
    said = text.split("encountered:")[-1].splitlines()
    lines = [line.strip() for line in said if line.strip() and "pipeline object is no longer valid" not in line]
    cause = lines[0] if lines else "no reason given"
    named = re.search(r"Failed to decode sample #\d+ : (.+)", cause)
    sample = os.path.join(split, named.group(1)) if named else f"a sample of {split}"
    return UsageError(
        f"DALI could not decode {sample} ({cause}), although its header is sound: it is corrupt "
        f"inside; replace or remove it (`dali-launch data check {Path(split).parent} --decode` finds every "
        f"such one), then resume the run"
    )


def jsonl(left_out) -> str:
    """RUN/bad_samples.jsonl: every sample the scans `left_out` name, one JSON object a line."""
    return "".join(
        json.dumps({"split": scan.split, "sample": b.sample, "what": b.what}) + "\n"
        for scan in left_out
        for b in scan.bad
    )
