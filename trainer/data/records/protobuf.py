"""The little of protobuf's wire format the record sources read (Caffe2's TensorProtos, TensorFlow's
tf.Example): varints and a message's fields. The trainer does not depend on protobuf for two messages."""

from __future__ import annotations


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """The varint at `buf[i:]` and the index after it."""
    value = shift = 0
    while True:
        byte = buf[i]
        value, i, shift = value | (byte & 0x7F) << shift, i + 1, shift + 7
        if not byte & 0x80:
            return value, i


def fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of a protobuf message: varints and length-delimited fields."""
    out, i = [], 0
    while i < len(buf):
        key, i = varint(buf, i)
        if key & 7 == 0:
            value, i = varint(buf, i)
        elif key & 7 == 2:
            size, i = varint(buf, i)
            value, i = buf[i : i + size], i + size
        else:
            width = 8 if key & 7 == 1 else 4
            value, i = buf[i : i + width], i + width
        out.append((key >> 3, value))
    return out


def first_int(value: int | bytes) -> int:
    """The first integer of a repeated integer field, packed (bytes) or not, as a signed 64-bit value."""
    n = varint(value, 0)[0] if isinstance(value, bytes) else value
    return n - (1 << 64) if n >= 1 << 63 else n
