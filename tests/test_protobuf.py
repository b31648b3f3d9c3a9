"""The hand-written protobuf wire format (trainer/data/protobuf.py) that every record format is built on."""

import struct

import pytest

from dali_launch.launcher.data import idx
from dali_launch.trainer.data import protobuf as pb
from dali_launch.trainer.data.records import caffe2


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 1 << 31, (1 << 64) - 1])
def test_varints_round_trip(n):
    encoded = pb.varint(n)
    assert pb.read_varint(encoded + b"tail", 0) == (n, len(encoded))
    assert pb.varints(encoded * 3) == [n] * 3


def test_known_encodings():
    """The bytes protobuf's own documentation gives, so the round trip cannot agree with itself wrongly."""
    assert pb.varint(150) == b"\x96\x01"
    assert pb.varint_field(1, 150) == b"\x08\x96\x01"
    assert pb.field(2, b"testing") == b"\x12\x07testing"
    assert len(pb.varint(pb.unsigned(-1))) == 10  # negative int32s take 10 bytes, as protobuf writes them


@pytest.mark.parametrize("value", [-(1 << 63), -5, -1, 0, 7, (1 << 63) - 1])
def test_signed_undoes_unsigned(value):
    assert pb.signed(pb.unsigned(value)) == value


def test_fields_round_trip_every_wire_type():
    nested = pb.field(1, b"inner") + pb.varint_field(2, 9)
    fixed64, fixed32 = struct.pack("<d", 1.5), struct.pack("<f", 2.5)
    message = (
        pb.varint_field(1, 300)
        + pb.field(2, nested)
        + pb.varint(3 << 3 | 1)
        + fixed64
        + pb.varint(4 << 3 | 5)
        + fixed32
        + pb.field(2, b"")
    )
    assert pb.fields(message) == [(1, 300), (2, nested), (3, fixed64), (4, fixed32), (2, b"")]
    assert pb.fields(nested) == [(1, b"inner"), (2, 9)]
    assert pb.fields(b"") == []


@pytest.mark.parametrize(
    "message, error",
    [
        (b"\x96", "truncated varint"),  # a key whose continuation bit promises another byte
        (pb.varint_field(1, 300)[:-1], "truncated varint"),
        (pb.field(1, b"payload")[:-2], "truncated field"),
        (pb.varint(1 << 3 | 3), "unsupported wire type 3"),  # a group: no record format has one
    ],
)
def test_broken_messages_say_what_is_wrong(message, error):
    with pytest.raises(ValueError, match=f"^{error}$"):
        pb.fields(message)


@pytest.mark.parametrize("label", [0, 9, -3])
def test_what_the_launcher_writes_the_trainer_reads(label):
    """The launcher writes Caffe2 records, the trainer's global sample order reads them: one wire format."""
    image, read = caffe2.parse(idx.caffe2_record(b"\xff\xd8 jpeg", label))
    assert (image, read) == (b"\xff\xd8 jpeg", label)
