"""The protobuf wire format, by hand: enough to write and read the Caffe2 TensorProtos and tf.Example
records of the data formats. A few tiny messages do not justify a protobuf dependency and generated code.

It lives in the trainer because the trainer reads records (records/caffe2.py) and must not import the
launcher; the launcher, which writes and checks records, imports it from here.
"""

from __future__ import annotations

_LEN, _VARINT, _FIXED64, _FIXED32 = 2, 0, 1, 5  # wire types
_INT64 = 1 << 64  # int32/int64 varints carry negatives as 64-bit two's complement


# --- writing ------------------------------------------------------------------------------------


def varint(n: int) -> bytes:
    """A base-128 varint; `n` must be >= 0 (see `unsigned` for negative numbers)."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): a sub-message, bytes, a string or a packed list."""
    return varint(number << 3 | _LEN) + varint(len(payload)) + payload


def varint_field(number: int, value: int) -> bytes:
    """A varint field (wire type 0): an enum, a bool or an unpacked integer."""
    return varint(number << 3 | _VARINT) + varint(value)


def unsigned(value: int) -> int:
    """An int32/int64 as protobuf writes it: a negative one is its 64-bit two's complement (10 bytes)."""
    return value % _INT64


def signed(value: int) -> int:
    """The int32/int64 that `unsigned` wrote."""
    return value - _INT64 if value >= 1 << 63 else value


# --- reading ------------------------------------------------------------------------------------


def first_int(value: int | bytes) -> int:
    """The first integer of a repeated int32/int64 field, packed (bytes) or not, signed."""
    return signed(read_varint(value, 0)[0] if isinstance(value, bytes) else value)


def read_varint(buf: bytes, i: int) -> tuple[int, int]:
    """The varint at `buf[i:]` and the index after it; ValueError if `buf` ends inside it."""
    value = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not byte & 0x80:
            return value, i


def varints(buf: bytes) -> list[int]:
    """The values of a packed repeated varint field."""
    out, i = [], 0
    while i < len(buf):
        value, i = read_varint(buf, i)
        out.append(value)
    return out


def fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of one message in wire order: an int for a varint, bytes otherwise.
    ValueError if the message is cut short or uses a wire type none of our records have (groups)."""
    out, i = [], 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        value, i = _value(buf, i, key & 7)
        out.append((key >> 3, value))
    return out


def _value(buf: bytes, i: int, wire: int) -> tuple[int | bytes, int]:
    if wire == _VARINT:
        return read_varint(buf, i)
    if wire == _LEN:
        size, i = read_varint(buf, i)
        if i + size > len(buf):
            raise ValueError("truncated field")
        return buf[i : i + size], i + size
    if wire in (_FIXED64, _FIXED32):
        width = 8 if wire == _FIXED64 else 4
        return buf[i : i + width], i + width
    raise ValueError(f"unsupported wire type {wire}")
