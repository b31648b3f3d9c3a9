"""One split's scan for bad samples: every encoded image checked from its header and last bytes
(images.py: markers and sizes, no decode), cached in the per-user cache under the split's fingerprint
(its files' names, sizes and modification times), so a requeue, a resume or the next run on the same data
pays only for the listing. What a split's samples are, in its reader's order, is its format's `listing`
(records/<format>.py); what `--bad-samples` does with the scan is bad_samples.py's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.cache import cache_root
from dali_launch.trainer.data import formats
from dali_launch.trainer.data.images import image_size
from dali_launch.trainer.run_dir import write_atomic

CHUNK = 512  # samples per task of the checking threads


@dataclass(frozen=True)
class Bad:
    index: int  # the sample's number in the reader's order
    sample: str  # how a message names it: a file, `record N of SHARD`, `sample NAME of SHARD`
    what: str  # what is wrong, as images.py says it: "is a truncated JPEG (...)"

    def line(self) -> str:
        return f"{self.sample} {self.what}"


@dataclass(frozen=True)
class Scan:
    split: str
    count: int  # samples in the split
    bad: tuple[Bad, ...]


@dataclass
class Listing:
    """A split's samples as one reader numbers them: how many, their fingerprint, each one's name, and
    what is wrong with sample i (None: nothing)."""

    split: str
    count: int
    fingerprint: str
    name: object  # i -> str
    problem: object  # i -> str | None
    recheck: bool = False  # the fingerprint cannot see a file rewritten in place: check cached bad ones again
    opened: object = contextlib.nullcontext  # () -> context manager: what `problem` reads through, held open
    threads: bool = True  # checked by a pool of threads (an LMDB is read from one handle, in one thread)

    def check(self, start: int, end: int) -> list[Bad]:
        found = ((i, self.problem(i)) for i in range(start, min(end, self.count)))
        return [Bad(i, self.name(i), what) for i, what in found if what]


def scans(reader: str) -> bool:
    """Whether a split read by `fn.readers.<reader>` can be scanned: a format here reads it."""
    return formats.of_reader(reader) is not None


def listing(reader: str, kwargs: dict) -> Listing:
    return formats.of_reader(reader).module().listing(kwargs)


def scan_split(reader: str, kwargs: dict) -> Scan:
    """Every sample of the split `fn.readers.<reader>(**kwargs)` reads, checked; from the cache when the
    split's files are as they were."""
    listed = listing(reader, kwargs)
    key = hashlib.sha256(f"{reader}\n{listed.fingerprint}".encode()).hexdigest()[:32]
    cached = cache_root() / "bad-samples" / f"{key}.json"
    try:
        data = json.loads(cached.read_text())
        bad = tuple(Bad(*b) for b in data["bad"])
        if listed.recheck:
            bad = tuple(found for b in bad for found in listed.check(b.index, b.index + 1))
        return Scan(listed.split, data["count"], bad)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    with listed.opened(), ThreadPoolExecutor(max_workers=min(16, 2 * (os.cpu_count() or 1))) as pool:
        chunks = range(0, listed.count, CHUNK)
        if not listed.threads:
            found = listed.check(0, listed.count)
        else:
            found = [bad for part in pool.map(lambda s: listed.check(s, s + CHUNK), chunks) for bad in part]
    scan = Scan(listed.split, listed.count, tuple(found))
    try:  # best effort: an unwritable cache costs the next run a scan, nothing else
        write_atomic(cached, json.dumps({"count": scan.count, "bad": [list(vars(b).values()) for b in found]}))
    except OSError:
        pass
    return scan


def name_of(reader: str, kwargs: dict, index: int) -> str:
    """How messages name sample `index` of the split (`data check --decode` names what Pillow refuses so)."""
    return listing(reader, kwargs).name(index)


# --- what the formats' listings share -----------------------------------------------------------


def stamp(path: str) -> str:
    st = os.stat(path)
    return f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n"


def shards_stamp(paths: list[str]) -> str:
    """The fingerprint of shard files and their indexes."""
    return hashlib.sha256("".join(stamp(p) for p in paths).encode()).hexdigest()


def image_problem(encoded, i: int) -> str | None:
    """What images.py says is wrong with the bytes `encoded(i)` returns (a record that cannot be parsed: so)."""
    try:
        data = encoded(i)
    except (ValueError, IndexError, KeyError) as e:
        return f"is corrupt ({e})"
    if not data:
        return "holds an empty image"
    try:
        image_size(data)
    except ValueError as e:
        return str(e)
    return None


def index_without(kwargs: dict, scan: Scan, indexes_key: str, lines, text) -> dict:
    """The reader's index files, each shard holding a bad sample replaced by a copy without its lines
    (`lines(index)`: an index's sample lines; `text(lines)`: an index of them), in the cache, named by
    the scan: every process and every run of the same data shares them."""
    indexes = [kwargs[indexes_key]] if isinstance(kwargs[indexes_key], str) else list(kwargs[indexes_key])
    bad, first, out = {b.index for b in scan.bad}, 0, []
    folder = cache_root() / "bad-samples" / hashlib.sha256(repr(scan).encode()).hexdigest()[:32]
    for n, index in enumerate(indexes):
        kept = lines(index)
        drop = {i - first for i in range(first, first + len(kept)) if i in bad}
        first += len(kept)
        if not drop:
            out.append(index)
            continue
        copy = folder / f"{n}-{Path(index).name}"
        if not copy.is_file():
            write_atomic(copy, text([line for i, line in enumerate(kept) if i not in drop]))
        out.append(str(copy))
    return {**kwargs, indexes_key: out}
