"""What an encoded image in a data set is, read from its header and its last bytes: checked before DALI
decodes it (the launcher's checks before a job, the trainer's pre-flight of a split: bad_samples.py); and
how large it is decoded (decoded_cache.py's estimate).

DALI's `fn.decoders.image` reads JPEG, PNG, BMP, TIFF, WebP, PNM and JPEG 2000 -- not GIF -- and
fails the whole pipeline on one undecodable or truncated image (measured with DALI 2.4: a JPEG cut
by 10 bytes stops it). Images of different sizes make batches DALI cannot stack, and the model
reads each image as one flat vector, so a data set must hold one size.
"""

from __future__ import annotations

import io
import os

# JPEG start-of-frame markers: baseline, progressive, lossless, arithmetic (not DHT C4, JPG C8, DAC CC).
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_PNG = b"\x89PNG\r\n\x1a\n"
HEAD = 16 * 1024  # a JPEG's markers before its frame header fit in this but for large EXIF or ICC blocks
TAIL = 64  # the end-of-image marker, and the zero padding some writers add after it


def check_file(path: str) -> str | None:
    """What is wrong with the image file at `path` for DALI's decoder, or None: read from its first HEAD
    and last TAIL bytes (two reads, no decode; ~15 µs a file from the page cache), the whole file only
    when its header goes on past HEAD (a large EXIF block) or its format is read through Pillow."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return "is empty"
        data = os.pread(fd, HEAD + TAIL, 0)
        if size > len(data):  # the middle is left out: markers and sizes are at the ends
            data += os.pread(fd, TAIL, size - TAIL)
        try:
            image_size(data)
            return None
        except ValueError as e:
            if size <= HEAD + TAIL or str(e).startswith("is a truncated JPEG"):
                return str(e)
        image_size(os.pread(fd, size, 0))
    except ValueError as e:
        return str(e)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    finally:
        os.close(fd)
    return None


def image_size(data: bytes) -> tuple[int, int]:
    """(height, width) of an encoded image DALI decodes; ValueError says what is wrong with it.

    JPEG and PNG -- what `data prepare` writes, and what most sets hold -- are read here in
    microseconds; the other formats through Pillow's header parser.
    """
    if data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    if data.startswith(_PNG):
        if data[12:16] != b"IHDR" or not data.rstrip(b"\0").endswith(b"IEND\xaeB`\x82"):
            raise ValueError("is a truncated PNG (no IHDR or IEND chunk)")
        return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    if data.startswith(b"GIF8"):
        raise ValueError("is a GIF, which DALI's image decoder does not read")
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
    except (UnidentifiedImageError, OSError, ValueError):
        raise ValueError("is not an image DALI decodes (JPEG, PNG, BMP, TIFF, WebP, PNM, JPEG 2000)") from None
    if image.format not in ("BMP", "TIFF", "WEBP", "PPM", "JPEG2000"):
        raise ValueError(f"is in {image.format} format, which DALI's image decoder does not read")
    return image.height, image.width


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i = 2
    while True:
        if i + 4 > len(data) or data[i] != 0xFF:
            raise ValueError("is not a readable JPEG (its header ends before the image size)")
        marker = data[i + 1]
        if marker == 0xFF:  # a fill byte
            i += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            i += 2
            continue
        if marker in _SOF:
            if i + 9 > len(data):
                raise ValueError("is not a readable JPEG (its header ends before the image size)")
            size = int.from_bytes(data[i + 5 : i + 7], "big"), int.from_bytes(data[i + 7 : i + 9], "big")
            break
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    # In the entropy-coded data 0xFF is followed by 0x00 or a restart marker: FF D9 is the end of the image,
    # which some writers follow with padding or a short trailer (libjpeg stops at it).
    if b"\xff\xd9" not in data[-TAIL:]:
        raise ValueError("is a truncated JPEG (it does not end with the end-of-image marker)")
    return size
