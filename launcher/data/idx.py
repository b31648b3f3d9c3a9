"""`dali-launch data prepare`: MNIST-format IDX files -> Caffe2 LMDBs, or JPEG class folders, for DALI.

The default output has the layout of DALI_extra's `db/MNIST`: `OUT/training/` and `OUT/testing/`,
each an LMDB whose values are serialised `caffe2.TensorProtos` holding a JPEG (STRING tensor) and an
INT32 label -- exactly what `fn.readers.caffe2` parses (dali/operators/reader/parser/caffe2_parser.h).
`--format folders` writes `OUT/{training,testing}/<label>/<n>.jpg` for `fn.readers.file`.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dali_launch.launcher.data import new_dir
from dali_launch.trainer.data import protobuf as pb
from dali_launch.trainer.errors import UsageError

# caffe2.TensorProto.DataType values (caffe2/proto/caffe2.proto).
_INT32, _STRING = 2, 4
SPLITS = {"train": "training", "t10k": "testing"}  # IDX file prefix -> DALI_extra folder name


# --- IDX --------------------------------------------------------------------------------------


def read_idx(path: Path) -> np.ndarray:
    """Reads one (optionally gzipped) IDX file: magic 0x0000 08 NDIM, big-endian dims, uint8 data."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise UsageError(f"cannot read IDX file {path}: {e}; re-download it") from e
    if len(raw) < 4 or raw[0:3] != b"\x00\x00\x08":
        raise UsageError(f"{path} is not a uint8 IDX file (bad magic); expected MNIST-format data")
    ndim = raw[3]
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = raw[4 + 4 * ndim :]
    if len(raw) < 4 + 4 * ndim or len(data) != int(np.prod(dims)):
        raise UsageError(f"{path} is truncated: header says {dims}, found {len(data)} bytes of data")
    return np.frombuffer(data, np.uint8).reshape(dims)


def find_idx_pair(from_dir: Path, prefix: str) -> tuple[Path, Path] | None:
    """The images/labels files of one split (`train` or `t10k`), gzipped or not, if both exist."""
    found = []
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        hits = [from_dir / f"{prefix}-{kind}{ext}" for ext in (".gz", "")]
        hits = [p for p in hits if p.is_file()]
        if not hits:
            return None
        found.append(hits[0])
    return found[0], found[1]


def load_split(from_dir: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    pair = find_idx_pair(from_dir, prefix)
    if pair is None:
        raise UsageError(f"no {prefix}-images-idx3-ubyte[.gz] / {prefix}-labels-idx1-ubyte[.gz] in {from_dir}")
    images, labels = read_idx(pair[0]), read_idx(pair[1])
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise UsageError(f"{from_dir}: {prefix} images {images.shape} and labels {labels.shape} do not match")
    return images, labels


# --- Caffe2 records ---------------------------------------------------------------------------


def caffe2_record(jpeg: bytes, label: int) -> bytes:
    """TensorProtos{protos: [image STRING tensor, label INT32 tensor]}, serialised by hand (protobuf.py)."""
    image = pb.varint_field(2, _STRING) + pb.field(6, jpeg)  # data_type, string_data
    dims, kind = pb.field(1, pb.varint(1)), pb.varint_field(2, _INT32)
    label_t = dims + kind + pb.field(4, pb.varint(pb.unsigned(label)))  # int32_data
    return pb.field(1, image) + pb.field(1, label_t)


IMAGE_MAGIC = (b"\xff\xd8", b"\x89PNG", b"BM", b"II*\x00", b"MM\x00*", b"RIFF", b"GIF8")


def check_caffe2_record(record: bytes) -> tuple[bytes | None, int | float]:
    """Raises ValueError unless `record` holds an encoded image (or raw bytes) and a label DALI can read.

    Returns the encoded image (None for raw pixels) and the label."""
    protos = [v for n, v in pb.fields(record) if n == 1]
    if len(protos) < 2:
        raise ValueError(f"{len(protos)} tensors, expected an image and a label")
    image = dict((n, v) for n, v in pb.fields(protos[0]))
    if image.get(2, 1) == _STRING:
        data = image.get(6, b"")
        if not data.startswith(IMAGE_MAGIC):
            raise ValueError("the image is not an encoded image (JPEG, PNG, BMP, TIFF, WebP, GIF)")
    elif image.get(2, 1) != 3 or not image.get(5):  # BYTE: raw pixels
        raise ValueError("the first tensor is neither an encoded image (STRING) nor raw pixels (BYTE)")
    labels = _label_values(pb.fields(protos[1]))
    if len(labels) != 1:  # DALI's reader enforces one value (a C++ assertion, mid-training)
        shown = ", ".join(f"{v:g}" for v in labels[:3]) + (", ..." if len(labels) > 3 else "")
        raise ValueError(f"its label holds {len(labels)} values ({shown}); the reader takes one class id per record")
    return (image.get(6, b"") if image.get(2, 1) == _STRING else None), labels[0]


def _label_values(fields: list) -> list[int | float]:
    """The values of a label tensor as DALI reads them: int32_data (4) for INT32, float_data (3) for
    FLOAT (protobuf's default type), packed or not."""
    kind = dict(fields).get(2, 1)
    if kind not in (1, _INT32):
        raise ValueError("the label tensor is neither INT32 nor FLOAT")
    values = []
    for number, value in fields:
        if kind == _INT32 and number == 4:
            values += pb.varints(value) if isinstance(value, bytes) else [value]
        elif kind == 1 and number == 3 and isinstance(value, bytes) and len(value) % 4 == 0:
            values += np.frombuffer(value, "<f4").tolist()
    return [pb.signed(v) if isinstance(v, int) else v for v in values]


def encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image, mode="L").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def write_lmdb(out_dir: Path, images: np.ndarray, labels: np.ndarray, quality: int) -> None:
    """Writes one LMDB; keys are zero-padded indices so LMDB's key order is the data order."""
    import lmdb

    size = sum(len(encode_jpeg(images[i], quality)) for i in range(min(64, len(images))))
    map_size = max(1 << 24, 4 * size * len(images) // max(1, min(64, len(images))) + (1 << 24))
    env = lmdb.open(str(out_dir), map_size=map_size, subdir=True)
    with env.begin(write=True) as txn:
        for i, (image, label) in enumerate(zip(images, labels)):
            txn.put(f"{i:08d}".encode(), caffe2_record(encode_jpeg(image, quality), int(label)))
    env.close()


def write_folders(out_dir: Path, images: np.ndarray, labels: np.ndarray, quality: int, classes: int) -> None:
    """One folder per class, every class in every split (even if empty there): fn.readers.file labels
    a folder by its index among the sorted names, so zero-padded names keep label = folder name."""
    width = len(str(classes - 1))
    for label in range(classes):
        (out_dir / f"{label:0{width}d}").mkdir()
    digits = len(str(max(len(images) - 1, 0)))
    for i, (image, label) in enumerate(zip(images, labels)):
        (out_dir / f"{int(label):0{width}d}" / f"{i:0{digits}d}.jpg").write_bytes(encode_jpeg(image, quality))


# --- the command ------------------------------------------------------------------------------

FORMATS = ("lmdb", "folders")


@dataclass(frozen=True)
class PrepareReport:
    out_dir: Path
    counts: dict[str, int]


def prepare(
    from_dir: Path,
    to_dir: Path,
    quality: int = 95,
    test_fraction: float | None = None,
    seed: int = 0,
    layout: str = "lmdb",
) -> PrepareReport:
    """IDX files in `from_dir` -> `to_dir/{training,testing}` as LMDBs or class folders, written atomically.

    With both `train-*` and `t10k-*` present they become training and testing. With only one of
    them, `test_fraction` of it (seeded permutation) becomes testing: that is how the embedded
    MNIST test set serves as a small train/test pair.
    """
    if not from_dir.is_dir():
        raise UsageError(f"--from {from_dir} is not a directory; point it at MNIST-format IDX files")
    if not 1 <= quality <= 100:
        raise UsageError(f"--jpeg-quality {quality} is out of range; use 1..100")
    if layout not in FORMATS:
        raise UsageError(f"--format {layout} is not one of {', '.join(FORMATS)}")
    splits = _splits(from_dir, test_fraction, seed)
    classes = 1 + max(int(labels.max(initial=0)) for _, labels in splits.values())
    new_dir.check_free(to_dir, "--to")
    with new_dir.building(to_dir) as tmp:
        for name, (images, labels) in splits.items():
            (tmp / name).mkdir()
            if layout == "folders":
                write_folders(tmp / name, images, labels, quality, classes)
            else:
                write_lmdb(tmp / name, images, labels, quality)
    return PrepareReport(to_dir, {name: len(labels) for name, (_, labels) in splits.items()})


def _splits(from_dir: Path, test_fraction: float | None, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    present = [p for p in SPLITS if find_idx_pair(from_dir, p)]
    if not present:
        raise UsageError(f"no MNIST-format IDX files (train-*/t10k-*-idx?-ubyte[.gz]) in {from_dir}")
    if len(present) == 2 and test_fraction is None:
        return {SPLITS[p]: load_split(from_dir, p) for p in present}
    fraction = 0.2 if test_fraction is None else test_fraction
    if not 0 < fraction < 1:
        raise UsageError(f"--test-fraction {fraction} is out of range; use a value between 0 and 1")
    images, labels = load_split(from_dir, present[0])
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = round(len(labels) * fraction)
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    return {"training": (images[train], labels[train]), "testing": (images[test], labels[test])}
