"""Bad samples: the pre-flight check of a split's encoded images, and what `--bad-samples` does with them.

DALI's decoders fail the whole pipeline on one undecodable or truncated image without naming it
("nvImageCodec failure: '#4'"), and nvImageCodec may take the process down with it (a segfault: a text
file named .jpg, DALI 2.4). So before a reader is built, every sample of its split is checked from its
header and last bytes (images.py: markers and sizes, no decode) -- once per data set: the result is
cached in the per-user cache under the split's fingerprint (its files' names, sizes and modification
times), so a requeue, a resume or the next run on the same data pays only for the listing.

    --bad-samples stop   the first bad sample is one line naming it and what is wrong, before training
    --bad-samples skip   the bad samples are left out of the reader (its file list, or a copy of its
                         index without them): every other sample is read exactly once an epoch, and a
                         resumed run reads the same set; past --max-bad-samples (a fraction of the
                         split, or a count) it stops as `stop` does

Both the launcher (before a job: the built-in pipelines' splits) and `args.read` inside the trainer (a
pipeline of the user's own too) screen a split here, alike. A Caffe2 LMDB has no index to leave a
record out of, so it can only stop.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.cache import cache_root
from dali_launch.trainer.data.images import check_file, image_size
from dali_launch.trainer.data.records import caffe2, folders, tfrecord, webdataset
from dali_launch.trainer.data.records.common import as_list, read_bytes, shard_files
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import write_atomic

MODES = ("stop", "skip")
CHUNK = 512  # files per task of the checking threads
SKIPPED: dict[str, Scan] = {}  # split -> what this process's readers leave out (set_up records them)


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


def builtin_reader(pipeline: str, split: Path) -> tuple[str, dict] | None:
    """The reader and the paths a built-in pipeline reads `split` with (pipelines.py), for the launcher."""
    if pipeline == "folders":
        return folders.READER, {"file_root": str(split)}
    if pipeline in ("tfrecord", "webdataset"):
        suffix = ".tfrecord" if pipeline == "tfrecord" else ".tar"
        files, indexes = shard_files(str(split), suffix)
        if pipeline == "tfrecord":
            return tfrecord.READER, {"path": files, "index_path": indexes}
        return webdataset.READER, {"paths": files, "index_paths": indexes, "ext": webdataset.EXT}
    if pipeline == "mnist":
        return caffe2.READER, {"path": str(split)}
    return None


def screen(reader: str, kwargs: dict, mode: str, limit: str) -> dict:
    """`kwargs` of `fn.readers.<reader>` as the split's bad samples leave them: unchanged when it has none;
    a UsageError under `stop`, or past `limit` (--max-bad-samples); else without them (`skip`)."""
    if reader not in LISTINGS:
        return kwargs  # a reader of another format: DALI's own errors are all there is
    scan = scan_split(reader, kwargs)
    if not scan.bad:
        return kwargs
    first, more = scan.bad[0], len(scan.bad) - 1
    others = f" (and {more} more: `dali-launch data check {Path(scan.split).parent}` lists them)" if more else ""
    if mode != "skip":
        raise UsageError(
            f"{first.line()}{others}; replace or remove it, or pass --bad-samples skip to train without it"
        )
    if len(scan.bad) > allowed(limit, scan.count):
        raise UsageError(
            f"{len(scan.bad)} of the {scan.count} samples of {scan.split} are bad (the first: {first.line()}), "
            f"more than --max-bad-samples {limit} allows; replace them, or raise --max-bad-samples"
        )
    if reader == caffe2.READER:
        raise UsageError(
            f"{first.line()}{others}; a Caffe2 LMDB has no index to leave it out of, so --bad-samples skip "
            f"cannot: re-create the data set without it (`dali-launch data prepare`)"
        )
    SKIPPED[scan.split] = scan
    return LEFT_OUT[reader](kwargs, scan)


def allowed(limit: str, count: int) -> int:
    """--max-bad-samples as a count of this split: a fraction below 1 of its samples, or a count."""
    value = float(limit)
    return int(value * count) if value < 1 else int(value)


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


# --- one split's scan, cached ----------------------------------------------------------------------


def scan_split(reader: str, kwargs: dict) -> Scan:
    """Every sample of the split `fn.readers.<reader>(**kwargs)` reads, checked; from the cache when the
    split's files are as they were."""
    listing = LISTINGS[reader](kwargs)
    key = hashlib.sha256(f"{reader}\n{listing.fingerprint}".encode()).hexdigest()[:32]
    cached = _cache(key)
    try:
        data = json.loads(cached.read_text())
        bad = tuple(Bad(*b) for b in data["bad"])
        if listing.recheck:
            bad = tuple(found for b in bad for found in listing.check(b.index, b.index + 1))
        return Scan(listing.split, data["count"], bad)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    with listing.opened(), ThreadPoolExecutor(max_workers=min(16, 2 * (os.cpu_count() or 1))) as pool:
        chunks = range(0, listing.count, CHUNK)
        if not listing.threads:
            found = listing.check(0, listing.count)
        else:
            found = [bad for part in pool.map(lambda s: listing.check(s, s + CHUNK), chunks) for bad in part]
    scan = Scan(listing.split, listing.count, tuple(found))
    try:  # best effort: an unwritable cache costs the next run a scan, nothing else
        write_atomic(cached, json.dumps({"count": scan.count, "bad": [list(vars(b).values()) for b in found]}))
    except OSError:
        pass
    return scan


def _cache(key: str) -> Path:
    return cache_root() / "bad-samples" / f"{key}.json"


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


def _stamp(path: str) -> str:
    st = os.stat(path)
    return f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n"


def _folders(kwargs: dict) -> Listing:
    """Class folders. Their fingerprint is the file names and the folders' modification times, not a stat of
    every file (1.28 M files: 5 s against 13 s on 2 cores): adding, removing or renaming a file (cp, mv,
    rsync) touches its folder. A file rewritten in place is not seen, so the bad ones a cached scan names
    are checked again each time: one that was fixed so is good again."""
    root = kwargs["file_root"]
    files = _given_files(kwargs) or folders.ClassFolders(root).files
    paths = [os.path.join(root, name) for name, _ in files]
    folders_of = sorted({os.path.dirname(p) for p in paths} | {root})
    names = "\n".join(name for name, _ in files)
    stamp = hashlib.sha256(("".join(_stamp(f) for f in folders_of) + names).encode()).hexdigest()
    return Listing(str(Path(root)), len(paths), stamp, paths.__getitem__, lambda i: check_file(paths[i]), True)


def _given_files(kwargs: dict) -> list[tuple[str, int]] | None:
    """A user's own `files=` (and `labels=`) instead of the folders' listing."""
    if not kwargs.get("files"):
        return None
    labels = kwargs.get("labels") or range(len(kwargs["files"]))
    return list(zip(kwargs["files"], labels))


def _shards(kwargs: dict, files_key: str, indexes_key: str) -> tuple[list[str], list[str], str, str]:
    files, indexes = as_list(kwargs[files_key]), as_list(kwargs[indexes_key])
    stamp = hashlib.sha256("".join(_stamp(p) for p in [*files, *indexes]).encode()).hexdigest()
    return files, indexes, stamp, str(Path(files[0]).parent) if files else ""


def _tfrecords(kwargs: dict) -> Listing:
    files, indexes, stamp, split = _shards(kwargs, "path", "index_path")
    records = [(f, n, o, s) for f, index in enumerate(indexes) for n, (o, s) in enumerate(tfrecord.read_index(index))]

    def image(i: int) -> bytes:
        f, _, offset, size = records[i]
        payload = read_bytes(files[f], offset, size)[tfrecord.HEADER : -tfrecord.FOOTER].tobytes()
        return tfrecord.parse_example(payload)[0]

    name = lambda i: f"record {records[i][1]} of {files[records[i][0]]}"
    return Listing(split, len(records), stamp, name, lambda i: _image_problem(image, i))


def _webdataset(kwargs: dict) -> Listing:
    tars, indexes, stamp, split = _shards(kwargs, "paths", "index_paths")
    ext = webdataset.source(kwargs).image_ext
    samples = [
        (t, {e: (o, s, n) for e, o, s, n in members})
        for t, index in enumerate(indexes)
        for members in webdataset.read_index(index)
    ]

    def name(i: int) -> str:
        tar, members = samples[i]
        member = members[ext][2] if ext in members else next(iter(members.values()))[2]
        return f"sample {member.rpartition('.')[0] or member} of {tars[tar]}"

    def image(i: int) -> bytes:
        tar, members = samples[i]
        if ext not in members:
            raise ValueError(f"it has no .{ext} member")
        return read_bytes(tars[tar], *members[ext][:2]).tobytes()

    return Listing(split, len(samples), stamp, name, lambda i: _image_problem(image, i))


def _caffe2(kwargs: dict) -> Listing:
    """An LMDB, read through one handle that is closed again (or the process's own, caffe2.opened): py-lmdb
    opens a path once per process, and the launcher's own checks open it after this."""
    path, held = kwargs["path"], {}
    keys = caffe2.keys(path)

    @contextlib.contextmanager
    def opened():
        with caffe2.opened(path) as env, env.begin(buffers=False) as txn:
            held["txn"] = txn
            yield
        held.clear()

    name = lambda i: f"record {keys[i].decode(errors='replace')} of {path}"
    image = lambda i: caffe2.parse(held["txn"].get(keys[i]))[0]
    stamp = _stamp(os.path.join(path, "data.mdb"))
    return Listing(path, len(keys), stamp, name, lambda i: _image_problem(image, i), opened=opened, threads=False)


def _image_problem(encoded, i: int) -> str | None:
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


def name_of(reader: str, kwargs: dict, index: int) -> str:
    """How messages name sample `index` of the split (`data check --decode` names what Pillow refuses so)."""
    return LISTINGS[reader](kwargs).name(index)


LISTINGS = {
    folders.READER: _folders,
    tfrecord.READER: _tfrecords,
    webdataset.READER: _webdataset,
    caffe2.READER: _caffe2,
}


# --- the reader without them ------------------------------------------------------------------------


def _folders_without(kwargs: dict, scan: Scan) -> dict:
    root, bad = kwargs["file_root"], {b.index for b in scan.bad}
    files = _given_files(kwargs) or folders.ClassFolders(root).files
    kept = [entry for i, entry in enumerate(files) if i not in bad]
    return {**kwargs, "files": [name for name, _ in kept], "labels": [int(label) for _, label in kept]}


def _index_without(kwargs: dict, scan: Scan, indexes_key: str, rewrite) -> dict:
    """The reader's index files, each shard holding a bad sample replaced by a copy without its lines
    (in the cache, named by the scan: every process and every run of the same data shares them)."""
    indexes = as_list(kwargs[indexes_key])
    bad, first, out = {b.index for b in scan.bad}, 0, []
    folder = cache_root() / "bad-samples" / hashlib.sha256(repr(scan).encode()).hexdigest()[:32]
    for n, index in enumerate(indexes):
        lines = rewrite.lines(index)
        drop = {i - first for i in range(first, first + len(lines)) if i in bad}
        first += len(lines)
        if not drop:
            out.append(index)
            continue
        copy = folder / f"{n}-{Path(index).name}"
        if not copy.is_file():
            write_atomic(copy, rewrite.text([line for i, line in enumerate(lines) if i not in drop]))
        out.append(str(copy))
    return {**kwargs, indexes_key: out}


class _TfrecordIndex:
    @staticmethod
    def lines(index: str) -> list[str]:
        return [line for line in Path(index).read_text().splitlines() if line.strip()]

    @staticmethod
    def text(lines: list[str]) -> str:
        return "".join(line + "\n" for line in lines)


class _WebdatasetIndex:
    @staticmethod
    def lines(index: str) -> list[str]:
        return Path(index).read_text().splitlines()[1:]

    @staticmethod
    def text(lines: list[str]) -> str:
        return "".join(line + "\n" for line in [f"{webdataset.INDEX_VERSION} {len(lines)}", *lines])


LEFT_OUT = {
    folders.READER: _folders_without,
    tfrecord.READER: lambda kwargs, scan: _index_without(kwargs, scan, "index_path", _TfrecordIndex),
    webdataset.READER: lambda kwargs, scan: _index_without(kwargs, scan, "index_paths", _WebdatasetIndex),
}


def left_out(split: str) -> int:
    """How many samples of `split` this process's readers leave out."""
    scans = [scan for scan in SKIPPED.values() if Path(scan.split) == Path(split)]
    return len(scans[0].bad) if scans else 0


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
        f"DALI could not decode {sample} ({cause}), although its header is sound: the image is corrupt "
        f"inside; replace or remove it (`dali-launch data check {Path(split).parent} --decode` finds every "
        f"such one), then resume the run"
    )


def jsonl() -> str:
    """RUN/bad_samples.jsonl: every sample this process's readers leave out, one JSON object a line."""
    return "".join(
        json.dumps({"split": scan.split, "sample": b.sample, "what": b.what}) + "\n"
        for scan in SKIPPED.values()
        for b in scan.bad
    )
