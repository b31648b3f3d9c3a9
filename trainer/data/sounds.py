"""What an encoded sound in a data set is, read from its header and its last bytes: checked before DALI decodes
it (the trainer's pre-flight of a split, bad_samples.py; `dali-launch data check`), and how many channels it has
(the launcher's refusal of a run that keeps channels: launcher/data/audio_check.py).

DALI's `fn.decoders.audio` (libsndfile) reads WAV, FLAC and Ogg (Vorbis, Opus) at any sample rate. Measured
with DALI 2.4: a FLAC or Ogg file cut in half fails the whole pipeline ("Supported file format but file is
malformed"), without naming the file; a WAV cut in half decodes to the half that is left, silently. So the
end of each file is checked as well as its header:
- WAV: its data chunk announces no more bytes than the file holds;
- FLAC: its last frame ends the file (the frame's CRC-16 over its bytes, as its last two bytes say);
- Ogg: its last page ends the file (the page's header and segment table give its length).
Two or three small reads a file, no decode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dali_launch.trainer.data.formats import SOUND_SUFFIXES

HEAD = 4096  # a WAV's fmt chunk, a FLAC's STREAMINFO, an Ogg stream's first page: at the start of the file
TAIL = 256 * 1024  # a FLAC's last frame (16-bit stereo, 4,608 samples: under 20 KB) or an Ogg page (under 64 KB)
EXTENSIONS = SOUND_SUFFIXES  # .wav, .flac, .ogg: the audio format's file filters
KINDS = "WAV, FLAC or Ogg sound"
MAX_SYNCS = 32  # sync codes tried from the end (0xFFF8 also occurs inside frames: each try is one CRC)


@dataclass(frozen=True)
class Sound:
    kind: str  # WAV, FLAC, Ogg
    channels: int
    sample_rate: int


def is_sound(name: str) -> bool:
    return name.lower().endswith(EXTENSIONS)


def check_file(path: str) -> str | None:
    """What is wrong with the sound file at `path` for DALI's decoder, or None."""
    try:
        read(path)
    except ValueError as e:
        return str(e)
    return None


def read(path: str) -> Sound:
    """The sound file at `path`, from its header, its end checked; ValueError says what is wrong with it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise ValueError(f"cannot be read ({e.strerror})") from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise ValueError("is empty")
        head = os.pread(fd, HEAD, 0)
        tail_at = max(0, size - TAIL)
        tail = head if size <= HEAD else os.pread(fd, size - tail_at, tail_at)
        if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
            return _wav(fd, size)
        if head.startswith(b"fLaC"):
            return _flac(head, tail, tail_at)
        if head.startswith(b"OggS"):
            return _ogg(head, tail)
        raise ValueError(f"is not a {KINDS} (the formats DALI's audio decoder reads)")
    except OSError as e:
        raise ValueError(f"cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)


def _wav(fd: int, size: int) -> Sound:
    """RIFF chunks walked by their headers (8 bytes each) to `fmt ` and `data`."""
    at, fmt = 12, None
    while at + 8 <= size:
        chunk = os.pread(fd, 8, at)
        name, length = chunk[:4], int.from_bytes(chunk[4:8], "little")
        if name == b"fmt ":
            fmt = os.pread(fd, 16, at + 8)
        elif name == b"data":
            if fmt is None or len(fmt) < 16:
                raise ValueError("is not a readable WAV (no fmt chunk before its data)")
            # 0 and 0xFFFFFFFF: written by a stream that never went back to say the size (libsndfile reads on)
            if length not in (0, 0xFFFFFFFF) and at + 8 + length > size:
                raise ValueError(
                    f"is a truncated WAV (its data chunk announces {length:,} bytes, {size - at - 8:,} follow)"
                )
            return _sound("WAV", int.from_bytes(fmt[2:4], "little"), int.from_bytes(fmt[4:8], "little"))
        at += 8 + length + length % 2  # chunks are padded to even sizes
    raise ValueError("is a truncated WAV (no data chunk)")


def _flac(head: bytes, tail: bytes, tail_at: int) -> Sound:
    """STREAMINFO (the first metadata block): 20 bits of sample rate, then 3 bits of channels - 1."""
    if len(head) < 8 + 18 or head[4] & 0x7F != 0:
        raise ValueError("is not a readable FLAC (no STREAMINFO block)")
    bits = int.from_bytes(head[18:21], "big")
    sound = _sound("FLAC", ((bits >> 1) & 0x7) + 1, bits >> 4)
    frames = _flac_frames_start(head)
    if frames is not None and not _ends_with_whole_frame(tail, max(0, frames - tail_at)):
        raise ValueError("is a truncated FLAC (its last frame does not end the file)")
    return sound


def _flac_frames_start(head: bytes) -> int | None:
    """Where the audio frames begin: past the last metadata block (None: past the head read here)."""
    at = 4
    while at + 4 <= len(head):
        last, length = head[at] & 0x80, int.from_bytes(head[at + 1 : at + 4], "big")
        at += 4 + length
        if last:
            return at
    return None


def _ends_with_whole_frame(tail: bytes, first: int) -> bool:
    """Whether a frame (sync code 0xFFF8 or 0xFFF9) from `first` on runs to the end of `tail` with its CRC-16
    right; True too where `tail` holds no sync code to judge by (one frame longer than TAIL)."""
    starts, at = [], len(tail)
    while len(starts) < MAX_SYNCS:  # the nearest sync codes to the end: the last frame starts at one of them
        at = max(tail.rfind(b"\xff\xf8", first, at + 1), tail.rfind(b"\xff\xf9", first, at + 1))
        if at < 0:
            break
        starts.append(at)
    crc = int.from_bytes(tail[-2:], "big")
    return not starts or any(_crc16(tail[i:-2]) == crc for i in starts)


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005 if crc & 0x8000 else crc << 1) & 0xFFFF
        table.append(crc)
    return table


_CRC16 = _crc16_table()  # FLAC's frame CRC: polynomial x^16 + x^15 + x^2 + 1, MSB first, initial 0


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc


def _ogg(head: bytes, tail: bytes) -> Sound:
    """The first page's packet is the codec's identification header: Vorbis or Opus."""
    packet = head[27 + head[26] :] if len(head) > 27 else b""
    if packet.startswith(b"\x01vorbis") and len(packet) >= 16:
        sound = _sound("Ogg", packet[11], int.from_bytes(packet[12:16], "little"))
    elif packet.startswith(b"OpusHead") and len(packet) >= 16:
        sound = _sound("Ogg", packet[9], int.from_bytes(packet[12:16], "little"))
    else:
        raise ValueError("is an Ogg stream of neither Vorbis nor Opus, which DALI's audio decoder does not read")
    if not _ends_with_whole_page(tail):
        raise ValueError("is a truncated Ogg stream (its last page does not end the file)")
    return sound


def _ends_with_whole_page(tail: bytes) -> bool:
    """Whether a page header ("OggS") in `tail` announces a page that ends exactly where the file does."""
    at = tail.rfind(b"OggS")
    while at >= 0:
        if at + 27 <= len(tail):
            count = tail[at + 26]
            segments = tail[at + 27 : at + 27 + count]
            if len(segments) == count and at + 27 + count + sum(segments) == len(tail):
                return True
        at = tail.rfind(b"OggS", 0, at)
    return False


def _sound(kind: str, channels: int, sample_rate: int) -> Sound:
    if channels < 1 or sample_rate < 1:
        raise ValueError(f"is not a readable {kind} ({channels} channels at {sample_rate} Hz, says its header)")
    return Sound(kind, channels, sample_rate)
