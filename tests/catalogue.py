"""What the catalogue of bad inputs (test_catalogue_*.py, one file a group) shares: small data sets to
break, and the runner that holds every entry to one exact line on stderr, exit code 2, nothing written,
nothing started.

Each entry is (arguments, the exact message after `dali-launch: error: `). `{tmp}`, `{root}` (the
--run-root, which must never appear) and `{data}` (a good small data set) are filled in per test.
Entries run in-process through `cli.main`; those that need SLURM's own answer use the local cluster.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import lmdb
import numpy as np
import pytest
from conftest import mounted_tmpfs

from dali_launch.launcher.cli import main
from dali_launch.launcher.data import datasets, idx
from dali_launch.trainer.data import protobuf as pb

ERROR = "dali-launch: error: "
# A SLURM submission that would get as far as sbatch: what the SLURM entries add their one bad value to.
SUBMIT = ["--nodes", "1", "--platform", "cpu", "--data-dir", "{data}", "--run-root", "{root}"]


# --- the data sets entries start from -----------------------------------------------------------


def encoded_image(fmt: str = "JPEG", size: int = 28) -> bytes:
    import io

    from PIL import Image

    pixels = (np.arange(size * size) % 251).astype(np.uint8).reshape(size, size)
    buf = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buf, format=fmt)
    return buf.getvalue()


def good_records(n: int = 4, image: bytes | None = None) -> list[bytes]:
    return [idx.caffe2_record(image or encoded_image(), i % 10) for i in range(n)]


def _lmdb(path: Path, records: list[bytes]) -> Path:
    path.mkdir(parents=True)
    with lmdb.open(str(path), map_size=1 << 24) as env, env.begin(write=True) as txn:
        for i, record in enumerate(records):
            txn.put(f"{i:08d}".encode(), record)
    return path


def dataset(
    tmp: Path,
    training: list[bytes] | None = None,
    testing: list[bytes] | None = None,
    splits=("training", "testing"),
    empty=(),
) -> dict:
    """tmp/data with four good 28×28 JPEG records per split, unless a split's records are given;
    splits not in `splits` are left out, those in `empty` are empty folders."""
    root = tmp / "data"
    root.mkdir()
    for split, records in (("training", training), ("testing", testing)):
        if split in splits:
            _lmdb(root / split, good_records() if records is None else records)
        elif split in empty:
            (root / split).mkdir()
    return {"data": root}


def one_bad(record: bytes):
    """A data set whose training record 00000001 is `record`."""
    good = good_records()
    return lambda tmp: dataset(tmp, training=[good[0], record, *good[2:]])


def truncated(tmp: Path) -> dict:
    values = dataset(tmp, training=good_records(200))
    mdb = values["data"] / "training" / "data.mdb"
    with lmdb.open(str(mdb.parent), readonly=True, lock=False) as env:
        need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    os.truncate(mdb, need // 2)  # a copy that stopped half way
    return {**values, "have": f"{need // 2:,}", "need": f"{need:,}"}


def not_lmdb(tmp: Path) -> dict:
    values = dataset(tmp, splits=("testing",))
    (values["data"] / "training").mkdir()
    (values["data"] / "training" / "data.mdb").write_bytes(b"not an lmdb " * 1000)
    return values


def raw_pixels() -> bytes:
    raw = pb.varint_field(2, 3) + pb.field(5, bytes(784))  # a BYTE tensor: pixels, not an image
    label = pb.varint_field(2, 2) + pb.field(4, b"\x01")
    return pb.field(1, raw) + pb.field(1, label)


def label_record(*values: float, kind: int = idx._INT32) -> bytes:
    """A record with a good image and a label tensor holding `values` (INT32 or FLOAT, packed)."""
    image = pb.varint_field(2, idx._STRING) + pb.field(6, encoded_image())
    if kind == idx._INT32:
        data = pb.field(4, b"".join(pb.varint(pb.unsigned(int(v))) for v in values))
    else:
        data = pb.field(3, np.array(values, "<f4").tobytes())
    label = pb.varint_field(2, kind) + pb.field(1, pb.varint(len(values))) + data
    return pb.field(1, image) + pb.field(1, label)


def class_folders(classes: int):
    """Class folders 0..classes-1 in both splits, one 28×28 JPEG in each (the folders pipeline's layout)."""

    def make(tmp: Path) -> dict:
        for split in ("training", "testing"):
            for label in range(classes):
                (tmp / "data" / split / str(label)).mkdir(parents=True)
                (tmp / "data" / split / str(label) / "0.jpg").write_bytes(encoded_image())
        return {"data": tmp / "data"}

    return make


def synth_set(fmt: str, breaks=None, classes: int = 3):
    """A small `data synth` set of `fmt` (3 classes, 6 + 3 tiny images, shards of 4), then `breaks(root)`."""

    def make(tmp: Path) -> dict:
        from dali_launch.launcher.data.synth import SynthSpec, synth

        root = tmp / "data"
        synth(SynthSpec(root, fmt, classes, 6, 3, image_scale=0.05, shard_size=4, workers=1))
        if breaks:
            breaks(root)
        return {"data": root}

    return make


NOT_AN_IMAGE = b"this is not an image\n"


def broken_sample(fmt: str, kind: str, sample: int = 1, split: str = "training"):
    """A small `data synth` set of `fmt` (folders, tfrecord, webdataset, detection) whose sample `sample` (data synth's
    numbering: its file 0000000N.jpg, or record/sample N of shard 0) is a text file named .jpg (`kind`
    "text") or its JPEG cut short by 200 bytes ("truncated")."""
    spoil = (lambda jpeg: NOT_AN_IMAGE) if kind == "text" else (lambda jpeg: jpeg[:-200])
    return synth_set(fmt, lambda root: replace_image(root / split, fmt, sample, spoil))


def replace_image(split: Path, fmt: str, sample: int, spoil) -> None:
    """Sample `sample` of a `data synth` split's JPEG (or WAV) replaced by `spoil(jpeg)`; its shard and index rewritten."""
    from dali_launch.launcher.data import tfrecord, webdataset
    from dali_launch.trainer.data import formats
    from dali_launch.trainer.data.records.tfrecord import parse_example

    if fmt in (
        "folders",
        "detection",
        "video",
        "audio",
    ):  # a file of its own: in its class folder, or beside the annotations
        name = f"{sample:08d}.{ {'video': 'webm', 'audio': 'wav'}.get(fmt, 'jpg') }"
        path = next(split.glob(f"{'' if fmt == 'detection' else '*/'}{name}"))
        path.write_bytes(spoil(path.read_bytes()))
        return
    shard = split / f"shard-00000.{'tfrecord' if fmt == 'tfrecord' else 'tar'}"
    if fmt == "tfrecord":
        pairs = [parse_example(payload) for _, payload in tfrecord.records(shard)]
        tfrecord.write(shard, [(spoil(j) if i == sample else j, label) for i, (j, label) in enumerate(pairs)])
        return
    if fmt == "segmentation":  # the image spoilt, its mask kept
        found = webdataset.read_samples(shard, formats.SEGMENTATION_EXT)
        samples = [(int(b), spoil(j) if int(b) == sample else j, png) for b, j, png in found]
        webdataset.write(shard, samples, formats.SEGMENTATION_EXT)
        return
    found = webdataset.read_samples(shard)
    webdataset.write(shard, [(int(b), spoil(j) if int(b) == sample else j, int(c)) for b, j, c in found])


# What a --sample-order global checkpoint records (train.Loop._order); test_elastic checks a real one's.
ORDER_KEYS = ("position", "global_batch", "first_global_batch", "devices", "steps_per_call", "dataset")


def global_order_run(tmp: Path, data: Path, order: str = "global", **train) -> Path:
    """A --local run on 2 processes × 2 devices (global batch 120) over `data`, stopped mid-epoch at position
    360: its run directory, with its checkpoint as the launcher reads one before a resume (Orbax's JSON
    metadata of a complete step), so elastic resume's refusals need no real run. `order`: global, or
    shards (the default order's record, checkpoint.shard_record: 4 pipelines of 30, 3 calls done)."""
    from dali_launch.launcher.route import directory
    from dali_launch.launcher.run_config import LaunchConfig, RunConfig
    from dali_launch.trainer.config import DataConfig, replaced
    from dali_launch.trainer.data import records

    run = RunConfig(
        launch=LaunchConfig(run_root=str(tmp / "old-runs"), gpus_per_node=4, tasks_per_node=2, local=True),
        data=DataConfig(sample_order=order),
    )
    run = replaced(run, global_batch_size=120, **train)
    paths = directory.create(run, data, "local")
    values = (360, 120, 120, 4, 1, records.fingerprint_of(data / "training"))
    meta = {"epoch": 0, "calls_done": 3, "dali": [[], []], "order": dict(zip(ORDER_KEYS, values))}
    if order == "shards":
        reading = {"devices": 4, "readers": 1, "batch": 30, "steps": 1}
        shards = {"reading": reading, "shard_ids": [[0, 1], [2, 3]], "sample": {}}
        meta = {
            **meta,
            "order": None,
            "dali": [["AA==", "AQ=="], ["Ag==", "Aw=="]],
            "shards": {**meta["order"], **shards},
        }
    step = paths.checkpoints / "360"
    (step / "meta").mkdir(parents=True)
    (step / "meta" / "metadata").write_text(json.dumps(meta))
    (step / "commit_success.txt").write_text("")
    return paths.root


def a_file(tmp: Path) -> dict:
    (tmp / "data.lmdb").write_bytes(b"")
    return {"data": tmp / "data.lmdb"}


def empty_folder(tmp: Path) -> dict:
    (tmp / "data").mkdir()
    return {"data": tmp / "data"}


@pytest.fixture
def full_fs(tmp_path):
    """A 4 MiB tmpfs at tmp_path/full-fs: less free space than a run needs (root only; unmounted after)."""
    with mounted_tmpfs(tmp_path / "full-fs", "4m") as mount:
        yield mount


# --- running an entry ---------------------------------------------------------------------------


@pytest.fixture
def nothing_starts(monkeypatch):
    """Any job start, submission or device use fails the test loudly: the entries must stop before."""
    import submitit

    from dali_launch.launcher.backends.local import LocalRanks
    from dali_launch.trainer import task, topology

    def boom(*args, **kwargs):
        raise AssertionError("a bad input got as far as starting a job or taking a device")

    monkeypatch.setattr(task, "run_task", boom)
    monkeypatch.setattr(LocalRanks, "start", boom)
    monkeypatch.setattr(submitit.SlurmExecutor, "submit", boom)
    monkeypatch.setattr(topology, "initialize", boom)
    monkeypatch.setattr(topology, "local_devices", boom)


@pytest.fixture
def place(tmp_path):
    """The folder an entry runs in, with the things entries point at; `fill` formats an entry."""
    (tmp_path / "file").write_text("")
    (tmp_path / "empty").mkdir()
    idx = tmp_path / "idx"
    shutil.copytree(datasets.EMBEDDED_IDX, idx)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("")
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "t10k-images-idx3-ubyte").write_bytes(
        b"\x00\x00\x08\x03" + b"".join(n.to_bytes(4, "big") for n in (10, 28, 28)) + bytes(100)
    )
    (tmp_path / "cut" / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01" + (10).to_bytes(4, "big") + bytes(10))

    def fill(args, message, make):
        values = make(tmp_path) if make else dataset(tmp_path)
        values = {
            "tmp": tmp_path,
            "root": tmp_path / "runs",
            "idx": idx,
            "newline_root": repr(f"{tmp_path}/a\nb"),
            **values,
        }
        return [a.format(**values) for a in args], message.format(**values)

    yield tmp_path, fill


def snapshot(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if not p.is_symlink()
    }


def check_entry(capsys, place, args: list[str], message: str, make=None) -> None:
    """An entry with its {placeholders} filled from `place` (the data set `make(tmp)` makes, else a good one)."""
    folder, fill = place
    run_entry(capsys, folder, *fill(args, message, make))


def run_entry(capsys, folder: Path, args: list[str], message: str) -> None:
    """The entry: exit code 2, exactly one line, exactly this message, and the folder as it was."""
    before = snapshot(folder)
    code = main(args)
    err = capsys.readouterr().err
    assert (code, err) == (2, f"{ERROR}{message}\n")
    assert snapshot(folder) == before, "a bad input left something written"
    assert not (folder / "runs").exists()
