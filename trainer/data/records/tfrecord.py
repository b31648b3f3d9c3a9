"""TFRecord shards of tf.Examples (`dali-launch data synth --format tfrecord`, TensorFlow's ImageNet):
records file after file (the files as given: sorted) in the order of each file's DALI index, as
`fn.readers.tfrecord(path=[...], index_path=[...])` numbers them. The index gives each record's
offset and size: uint64 length, uint32 CRC, the Example, uint32 CRC (the CRCs are the launcher's
check before a job, not read again here)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dali_launch.trainer.data import protobuf as pb
from dali_launch.trainer.data.records.common import as_list, read_bytes
from dali_launch.trainer.data.sample_scan import Listing, Scan, image_problem, index_without, shards_stamp

IMAGE, LABEL = "image/encoded", "image/class/label"
HEADER, FOOTER = 12, 4  # bytes around a record's Example


class TFRecords:
    def __init__(self, paths: list[str], index_paths: list[str]):
        self.paths = list(paths)
        self.records = [(f, offset, size) for f, index in enumerate(index_paths) for offset, size in read_index(index)]

    def __len__(self) -> int:
        return len(self.records)

    def keys(self) -> list[bytes]:
        return [f"{os.path.basename(self.paths[f])}:{offset}".encode() for f, offset, _ in self.records]

    def read(self, index: int) -> tuple[np.ndarray, int]:
        f, offset, size = self.records[index]
        image, label = parse_example(read_bytes(self.paths[f], offset, size)[HEADER:-FOOTER].tobytes())
        return np.frombuffer(image, np.uint8), label


def source(kwargs: dict) -> TFRecords:
    return TFRecords(as_list(kwargs["path"]), as_list(kwargs["index_path"]))


def native(outputs: dict, kwargs: dict | None = None):
    """(encoded, class ids) of `fn.readers.tfrecord`'s outputs: its features by name."""
    return outputs[IMAGE], outputs[LABEL]


def parse_example(payload: bytes) -> tuple[bytes, int]:
    """The image bytes and class id of a tf.Example: Features{map<string, Feature>}, where a Feature is
    a bytes_list (1) or an int64_list (3), each holding repeated values (1); ValueError if either is
    missing (the launcher's check before a job says which record)."""
    features = dict(pb.fields(payload)).get(1, b"")
    found = {}
    for number, entry in pb.fields(features):
        if number == 1:
            fields = dict(pb.fields(entry))
            found[fields.get(1, b"").decode(errors="replace")] = fields.get(2, b"")
    if IMAGE not in found or LABEL not in found:
        raise ValueError(f"an Example without {IMAGE!r} and {LABEL!r}")
    (image,) = [v for n, v in pb.fields(dict(pb.fields(found[IMAGE])).get(1, b"")) if n == 1] or [b""]
    values = dict(pb.fields(found[LABEL])).get(3)
    if values is None:
        raise ValueError(f"{LABEL!r} is not an int64 list")
    raw = dict(pb.fields(values)).get(1)
    if raw is None:
        raise ValueError(f"{LABEL!r} is empty")
    return image, pb.first_int(raw)


def read_index(path: str | Path) -> list[tuple[int, int]]:
    """DALI's index file (tools/tfrecord2idx): a line "offset size" per record; ValueError if a line is
    not two integers."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        parts = line.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"line {n} is not 'offset size'")
        out.append((int(parts[0]), int(parts[1])))
    return out


def listing(kwargs: dict) -> Listing:
    """The split's records for the bad-sample scan, named `record N of SHARD`."""
    files, indexes = as_list(kwargs["path"]), as_list(kwargs["index_path"])
    records = [(f, n, o, s) for f, index in enumerate(indexes) for n, (o, s) in enumerate(read_index(index))]

    def image(i: int) -> bytes:
        f, _, offset, size = records[i]
        return parse_example(read_bytes(files[f], offset, size)[HEADER:-FOOTER].tobytes())[0]

    name = lambda i: f"record {records[i][1]} of {files[records[i][0]]}"
    split = str(Path(files[0]).parent) if files else ""
    return Listing(split, len(records), shards_stamp([*files, *indexes]), name, lambda i: image_problem(image, i))


def without(kwargs: dict, scan: Scan) -> dict:
    """The reader's arguments with copies of the indexes that list a bad record, without its line."""
    lines = lambda index: [line for line in Path(index).read_text().splitlines() if line.strip()]
    return index_without(kwargs, scan, "index_path", lines, lambda kept: "".join(line + "\n" for line in kept))
