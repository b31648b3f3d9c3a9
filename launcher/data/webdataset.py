"""WebDataset tar shards (`%06d.jpg` + `%06d.cls` per sample, or `%06d.jpg` + `%06d.png`: an image and
its mask) and DALI's index files for them.

`.cls` holds the class id as ASCII digits, as the webdataset library writes it. DALI's
`fn.readers.webdataset` takes an index per tar (DALI's tools/wds2idx.py, version v1.2): a first line
"v1.2 SAMPLES", then per sample its components as "ext offset size name", offset being where the
member's data starts. Writing the index with the tar spares reading the tars again; the trainer's
record source (trainer/data/records/webdataset.py) reads it.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable
from pathlib import Path

from dali_launch.trainer.data import formats
from dali_launch.trainer.data.formats import WEBDATASET_EXT as EXT
from dali_launch.trainer.data.records.webdataset import INDEX_VERSION

SUFFIX, INDEX_SUFFIX = formats.get("webdataset").suffix, ".idx"  # the files its Format reads


def write(path: Path, samples: Iterable[tuple[int, bytes, int | bytes]], ext: list[str] = EXT) -> int:
    """Writes one tar of (index, jpeg, label) samples and its index, the label a class id (its ASCII digits
    are written) or a member's bytes (a mask's PNG); `ext` names the two members. Returns the JPEG bytes
    written. Members carry no time, owner or mode of this machine: the same samples give the same bytes."""
    lines, total = [], 0
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for index, jpeg, label in samples:
            parts, second = [], label if isinstance(label, bytes) else str(label).encode()
            for kind, data in zip(ext, (jpeg, second)):
                info = tarfile.TarInfo(f"{index:06d}.{kind}")
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
                start = tar.offset - -(-len(data) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE  # data, after its header
                parts.append(f"{kind} {start} {info.size} {info.name}")
            lines.append(" ".join(parts))
            total += len(jpeg)
    path.with_suffix(INDEX_SUFFIX).write_text(f"{INDEX_VERSION} {len(lines)}\n" + "".join(f"{x}\n" for x in lines))
    return total


def read_samples(path: Path, ext: list[str] = EXT) -> list[tuple[str, bytes, bytes]]:
    """(basename, jpg bytes, second member's bytes: `ext`'s) of every sample of a tar, in member order, read
    with tarfile."""
    samples: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tar:
        for member in tar:
            if member.isfile():
                base, _, kind = member.name.partition(".")
                samples.setdefault(base, {})[kind] = tar.extractfile(member).read()
    return [(base, parts.get(ext[0], b""), parts.get(ext[1], b"")) for base, parts in samples.items()]
