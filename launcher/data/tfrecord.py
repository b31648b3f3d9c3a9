"""TFRecord files of tf.Example protos, as TensorFlow writes ImageNet, and DALI's index files for them.

A record is framed as: uint64 length, uint32 masked CRC32C of the length, the bytes, uint32 masked
CRC32C of the bytes (tensorflow/core/lib/io/record_writer.cc). An Example holds `image/encoded` (the
JPEG) and `image/class/label` (int64; class ids from 0 here, where TensorFlow's ImageNet scripts
count from 1). DALI's `fn.readers.tfrecord` needs one index file per record file: a line
"offset size" per record (DALI's tools/tfrecord2idx), which this module writes beside each file;
the trainer's record source (trainer/data/records/tfrecord.py) parses Examples and reads the index.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import google_crc32c  # C-backed: a pure-Python CRC32C takes minutes per GB

from dali_launch.trainer.data import formats
from dali_launch.trainer.data import protobuf as pb
from dali_launch.trainer.data.records.tfrecord import IMAGE, LABEL

SUFFIX, INDEX_SUFFIX = formats.get("tfrecord").suffix, ".idx"  # the files its Format reads


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload))


def example(jpeg: bytes, label: int) -> bytes:
    """tf.Example{features{feature{"image/encoded": bytes_list, "image/class/label": int64_list}}}."""
    image = pb.field(1, pb.field(1, jpeg))  # Feature.bytes_list{value}
    label_feature = pb.field(3, pb.field(1, pb.varint(pb.unsigned(label))))  # Feature.int64_list{packed value}
    entries = [
        pb.field(1, pb.field(1, key.encode()) + pb.field(2, value))
        for key, value in ((IMAGE, image), (LABEL, label_feature))
    ]
    return pb.field(1, b"".join(entries))


def write(path: Path, samples: Iterable[tuple[bytes, int]]) -> int:
    """Writes one record file and its index (same stem, .idx); returns the JPEG bytes written."""
    offsets, total = [], 0
    with open(path, "wb") as f:
        for jpeg, label in samples:
            record = frame(example(jpeg, label))
            offsets.append((f.tell(), len(record)))
            f.write(record)
            total += len(jpeg)
    path.with_suffix(INDEX_SUFFIX).write_text("".join(f"{offset} {size}\n" for offset, size in offsets))
    return total


def records(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of every record of a file, both CRCs verified; ValueError says where it breaks."""
    data = path.read_bytes()
    i = 0
    while i < len(data):
        if i + 12 > len(data):
            raise ValueError(f"ends inside the header of the record at byte {i}")
        (length,) = struct.unpack_from("<Q", data, i)
        if struct.unpack_from("<I", data, i + 8)[0] != masked_crc(data[i : i + 8]):
            raise ValueError(f"the length of the record at byte {i} fails its CRC")
        end = i + 12 + length + 4
        if end > len(data):
            raise ValueError(f"the record at byte {i} is cut short")
        payload = data[i + 12 : end - 4]
        if struct.unpack_from("<I", data, end - 4)[0] != masked_crc(payload):
            raise ValueError(f"the record at byte {i} fails its CRC")
        yield i, payload
        i = end
