"""trainer/data/images.py: image sizes from headers agree with Pillow's decode; what DALI cannot read is named."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from dali_launch.trainer.data.images import image_size


def _encode(fmt: str, height: int = 28, width: int = 20, mode: str = "L", **save) -> bytes:
    shape = (height, width, 3) if mode == "RGB" else (height, width)
    pixels = (np.arange(np.prod(shape)) % 251).astype(np.uint8).reshape(shape)
    buf = io.BytesIO()
    Image.fromarray(pixels, mode=mode).save(buf, format=fmt, **save)
    return buf.getvalue()


@pytest.mark.parametrize(
    "fmt, save",
    [
        ("JPEG", {}),
        ("JPEG", {"progressive": True}),
        ("JPEG", {"exif": Image.Exif()}),
        ("PNG", {}),
        ("BMP", {}),
        ("TIFF", {}),
        ("WEBP", {}),
        ("PPM", {}),
    ],
)
@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_sizes_match_a_real_decode(fmt, save, mode):
    data = _encode(fmt, mode=mode, **save)
    assert image_size(data) == (28, 20) == Image.open(io.BytesIO(data)).convert("L").size[::-1]


@pytest.mark.parametrize(
    "data, message",
    [
        pytest.param(_encode("GIF"), "is a GIF, which DALI's image decoder does not read", id="gif"),
        pytest.param(
            _encode("JPEG")[:-2],
            "is a truncated JPEG (it does not end with the end-of-image marker)",
            id="jpeg-cut-short",
        ),
        pytest.param(
            _encode("JPEG")[:40],
            "is not a readable JPEG (its header ends before the image size)",
            id="jpeg-header-only",
        ),
        pytest.param(_encode("PNG")[:-12], "is a truncated PNG (no IHDR or IEND chunk)", id="png-cut-short"),
        pytest.param(
            b"BM" + b"\0" * 10,
            "is not an image DALI decodes (JPEG, PNG, BMP, TIFF, WebP, PNM, JPEG 2000)",
            id="bmp-garbage",
        ),
        pytest.param(_encode("ICO"), "is in ICO format, which DALI's image decoder does not read", id="ico"),
    ],
)
def test_what_dali_cannot_read(data, message):
    with pytest.raises(ValueError) as e:
        image_size(data)
    assert str(e.value) == message
