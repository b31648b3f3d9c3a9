"""What an encoded image in a data set is, read from its header: checked before a job (the launcher's data
checks), not inside DALI; and how large it is decoded (decoded_cache.py's estimate).

DALI's `fn.decoders.image` reads JPEG, PNG, BMP, TIFF, WebP, PNM and JPEG 2000 -- not GIF -- and
fails the whole pipeline on one undecodable or truncated image (measured with DALI 2.4: a JPEG cut
by 10 bytes stops it). Images of different sizes make batches DALI cannot stack, and the model
reads each image as one flat vector, so a data set must hold one size.
"""

from __future__ import annotations

import io

# JPEG start-of-frame markers: baseline, progressive, lossless, arithmetic (not DHT C4, JPG C8, DAC CC).
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_PNG = b"\x89PNG\r\n\x1a\n"


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
    if not data.rstrip(b"\0").endswith(b"\xff\xd9"):
        raise ValueError("is a truncated JPEG (it does not end with the end-of-image marker)")
    return size
