"""Which data a run reads, and the checks that make a bad data set fail before any job starts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dali_launch.launcher.data import idx
from dali_launch.trainer.cache import cache_root
from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import bad_samples, formats
from dali_launch.trainer.data.images import image_size
from dali_launch.trainer.data.records import caffe2, folders
from dali_launch.trainer.errors import UsageError

EMBEDDED_IDX = Path(__file__).parent / "embedded"  # the real MNIST test set (10,000 digits), shipped with us
SPLITS = ("training", "testing")
OWN = "folders, in the format your --pipeline reads"


def embedded_lmdb() -> Path:
    """The embedded sample as Caffe2 LMDBs (8,000 train / 2,000 test), made once per cache."""
    out = cache_root() / "mnist-t10k"
    if not out.exists():
        try:
            idx.prepare(EMBEDDED_IDX, out)
        except FileExistsError:  # another process made it first
            pass
        except UsageError:
            if not out.exists():
                raise
    return out


def data_dir_of(data_dir: str | None, pipeline: str = "mnist", num_classes: int = 10) -> Path:
    """--data-dir, else $DALI_EXTRA_PATH/db/MNIST, else the embedded sample; checked, absolute.

    Checked as `pipeline`'s format says (formats.py: its `check`); a pipeline of the user's own gets only
    the training/ and testing/ folders checked: its format is its own.
    """
    found = formats.get(pipeline)
    if data_dir:
        path, origin = Path(data_dir), "--data-dir"
    elif found and not found.default_data:
        raise UsageError(
            f"--pipeline {pipeline} needs --data-dir, a folder holding training/ and testing/ "
            f"{found.holds}; make one with `{found.make.format(path='DIR')}`"
        )
    elif os.environ.get("DALI_EXTRA_PATH"):
        path, origin = Path(os.environ["DALI_EXTRA_PATH"]) / "db" / "MNIST", "$DALI_EXTRA_PATH/db/MNIST"
    else:
        path, origin = embedded_lmdb(), "the embedded sample"
    check(path, origin, pipeline, num_classes)
    return path.resolve()


def check_resumed(data: DataConfig, run_dir: str) -> Path:
    """--resume RUN_DIR: the data the run started with (`data`, its own settings), checked as a new run's.

    A deleted or changed data set would otherwise fail inside DALI with a long traceback. The
    embedded sample is made again if its cache was cleared: it is the same data every time."""
    path = Path(data.data_dir)
    if path == (cache_root() / "mnist-t10k").resolve():
        embedded_lmdb()
    check(path, f"--resume {run_dir}: its data_dir", data.pipeline, data.num_classes)
    return path


def check_samples(path: Path, data: DataConfig, devices: int = 1) -> int | None:
    """A built-in pipeline's splits screened for images DALI cannot decode (trainer/data/bad_samples.py),
    with the reader arguments its readers take (formats.reader_of): under --bad-samples stop the first is
    refused here, before any job. And enough training samples for the job's `devices`: each device needs
    one of its own; then the format's own check of the samples against `data` (Format.fits). The training
    samples read, where the pipeline is a built-in (else None)."""
    counts = {}
    for split in SPLITS:
        found = formats.reader_of(data.pipeline, path / split)
        if found is None:
            return None
        counts[split] = count = bad_samples.samples_read(*found, data)
        if split == "training" and count < devices:
            raise UsageError(
                f"{path / split} holds {count} training samples, fewer than the job's {devices} devices: each "
                f"needs at least one; use fewer devices (--nodes, --gpus-per-node) or a larger data set"
            )
    fits = formats.get(data.pipeline).fits
    if fits:  # its samples against the run's settings (a clip's frames against --clip-frames)
        formats.imported(fits)(path, data)
    return counts["training"]


def check(path: Path, origin: str, pipeline: str = "mnist", num_classes: int = 10) -> None:
    """The data set at `path` as `pipeline`'s format says, or just its two splits for a pipeline of one's own."""
    found = formats.get(pipeline)
    if not path.exists():
        make = (found or formats.get("mnist")).make.format(path=path)
        raise UsageError(f"{origin} {path} does not exist; make it with `{make}`")
    if not path.is_dir():
        raise UsageError(f"{origin} {path} is a file; point it at the folder holding training/ and testing/")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"{origin} {path} is not readable; fix its permissions")
    missing = [split for split in SPLITS if not (path / split).is_dir()]
    if missing:
        what = f"has no {missing[0]}/" if len(missing) == 1 else "holds neither training/ nor testing/"
        raise UsageError(
            f"{origin} {path} {what}; a data set needs both training/ and testing/ {found.layout if found else OWN}"
        )
    if found:
        formats.imported(found.check)(path, origin, num_classes)


def check_lmdbs(path: Path, origin: str, num_classes: int) -> None:
    """Caffe2 LMDBs (--pipeline mnist): every record of both, one image size, labels in range."""
    scans = {split: scan_lmdb(path / split, origin) for split in SPLITS}
    if scans["training"].size != scans["testing"].size:
        raise UsageError(
            f"{path / 'testing'} holds {_hw(scans['testing'].size)} images but {path / 'training'} "
            f"{_hw(scans['training'].size)}; the model takes one image size, so re-create one of them"
        )
    check_labels(path, scans, num_classes)


def check_labels(path: Path, scans: dict[str, LmdbScan], num_classes: int) -> None:
    """Every label a class id the model has: out of range, one_hot gives a zero row and training
    learns nothing from that sample, yet ends with exit 0 (DALI, JAX and optax all accept it)."""
    low, low_key, low_split = min((*scan.lowest, split) for split, scan in scans.items())
    high, high_key, high_split = max((*scan.highest, split) for split, scan in scans.items())
    if low < 0:
        raise UsageError(
            f"record {low_key} of {path / low_split} has label {low}; labels are class ids from 0, "
            f"so re-create the data set with `dali-launch data prepare`"
        )
    if high >= num_classes:
        raise UsageError(
            f"--num-classes {num_classes} but record {high_key} of {path / high_split} has label "
            f"{high}; use --num-classes {high + 1} or more"
        )


def check_folders(path: Path, origin: str, num_classes: int) -> None:
    """Class folders as fn.readers.file numbers them: label = index in the sorted folder names, so
    both splits need the same folders (empty ones count) and at most --num-classes of them."""
    classes = {split: sorted(p.name for p in (path / split).iterdir() if p.is_dir()) for split in SPLITS}
    for split, names in classes.items():
        images = sum(
            1 for name in names for f in (path / split / name).iterdir() if f.suffix.lower() in folders.EXTENSIONS
        )
        if not images:
            raise UsageError(
                f"{path / split} holds no images in class folders ({split}/<class>/<image>.jpg); "
                f"make the tree with `dali-launch data prepare --format folders`"
            )
    if classes["training"] != classes["testing"]:
        raise UsageError(
            f"{path} has different class folders in training/ ({len(classes['training'])}) and "
            f"testing/ ({len(classes['testing'])}); give both the same ones (empty ones too) so labels match"
        )
    if len(classes["training"]) > num_classes:
        raise UsageError(
            f"{path} has {len(classes['training'])} classes but --num-classes is {num_classes}; "
            f"pass --num-classes {len(classes['training'])}"
        )


def check_lmdb(path: Path, origin: str) -> int:
    """Opens the LMDB read-only and checks every record; returns the number of records."""
    return scan_lmdb(path, origin).count


@dataclass(frozen=True)
class LmdbScan:
    count: int
    size: tuple[int, int]  # the one image size (h, w)
    lowest: tuple[int, str]  # the smallest label and the key of a record holding it
    highest: tuple[int, str]


def scan_lmdb(path: Path, origin: str) -> LmdbScan:
    """Checks every record as DALI will read it; returns what the data set's checks compare.

    Every label too: the records are read anyway, and reading labels added ~0.08 s to the ~0.7 s this
    check takes on Fashion-MNIST's 70,000 records (2 cores, page cache warm)."""
    import lmdb

    if path.is_dir() and not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"{path} is not readable; fix its permissions")
    if not (path / "data.mdb").is_file():
        raise UsageError(
            f"{path} is not an LMDB (no data.mdb); {origin} must hold training/ and testing/ "
            f"as made by `dali-launch data prepare`"
        )
    try:
        scan = _scan_records(path)
    except lmdb.Error as e:
        raise UsageError(f"{path} is not a readable LMDB ({e}); re-create it with `dali-launch data prepare`") from None
    if scan.count == 0:
        raise UsageError(f"{path} holds no records; point {origin} at a non-empty data set")
    return scan


def _scan_records(path: Path) -> LmdbScan:
    """Every record of the LMDB at `path` read, through this process's handle if it holds one (py-lmdb
    refuses a second open of a path: the trainer's sources, in the same process under `train`)."""
    with caffe2.opened(str(path)) as env:
        # Pages past the end of a cut-short file are mapped but absent: reading them is SIGBUS, here and in DALI.
        need, have = (env.info()["last_pgno"] + 1) * env.stat()["psize"], (path / "data.mdb").stat().st_size
        if have < need:
            raise UsageError(
                f"{path / 'data.mdb'} is truncated ({have:,} of {need:,} bytes); copy it again "
                f"or re-create it with `dali-launch data prepare`"
            )
        count, size, lowest, highest = 0, None, None, None
        with env.begin() as txn:
            for key, value in txn.cursor():
                name = key.decode(errors="replace")
                size, label = _check_record(name, value, path, size)
                if lowest is None or label < lowest[0]:
                    lowest = (label, name)
                if highest is None or label > highest[0]:
                    highest = (label, name)
                count += 1
    return LmdbScan(count, size, lowest, highest)


def _check_record(key: str, value: bytes, path: Path, size: tuple[int, int] | None) -> tuple[tuple[int, int], int]:
    """One record as DALI's Caffe2 reader and image decoder will take it; returns its image size and label."""
    fix = "re-create the data set with `dali-launch data prepare`"
    try:
        image, label = idx.check_caffe2_record(value)
    except ValueError as e:
        raise UsageError(f"record {key} of {path} is corrupt ({e}); {fix}") from None
    if isinstance(label, float) and not label.is_integer():
        raise UsageError(f"record {key} of {path} has label {label:g}, not a class id; {fix}")
    if image is None:
        raise UsageError(f"record {key} of {path} holds raw pixels, but the pipeline decodes encoded images; {fix}")
    try:
        this = image_size(image)
    except ValueError as e:
        raise UsageError(f"record {key} of {path} {e}; {fix} (it writes JPEGs)") from None
    if size is not None and this != size:
        raise UsageError(
            f"record {key} of {path} is a {_hw(this)} image but the records before it are "
            f"{_hw(size)}; the model takes one image size, so resize them"
        )
    return this, int(label)


def _hw(size: tuple[int, int]) -> str:
    return f"{size[0]}×{size[1]}"
