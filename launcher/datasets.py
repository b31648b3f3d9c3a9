"""Which data a run reads, and the checks that make a bad data set fail before any job starts."""
from __future__ import annotations

import os
from pathlib import Path

from dali_launch.launcher import data_prepare
from dali_launch.trainer.errors import UsageError

EMBEDDED_IDX = Path(__file__).parent / "data"  # the real MNIST test set (10,000 digits), shipped with us
SPLITS = ("training", "testing")


def cache_root() -> Path:
    return Path(os.environ.get("DALI_LAUNCH_CACHE", Path.home() / ".cache" / "dali-launch"))


def embedded_lmdb() -> Path:
    """The embedded sample as Caffe2 LMDBs (8,000 train / 2,000 test), made once per cache."""
    out = cache_root() / "mnist-t10k"
    if not out.exists():
        try:
            data_prepare.prepare(EMBEDDED_IDX, out)
        except FileExistsError:  # another process made it first
            pass
        except UsageError:
            if not out.exists():
                raise
    return out


def resolve(data_dir: str | None) -> Path:
    """--data-dir, else $DALI_EXTRA_PATH/db/MNIST, else the embedded sample; checked, absolute."""
    if data_dir:
        path, origin = Path(data_dir), "--data-dir"
    elif os.environ.get("DALI_EXTRA_PATH"):
        path, origin = Path(os.environ["DALI_EXTRA_PATH"]) / "db" / "MNIST", "$DALI_EXTRA_PATH/db/MNIST"
    else:
        path, origin = embedded_lmdb(), "the embedded sample"
    check(path, origin)
    return path.resolve()


def check(path: Path, origin: str) -> None:
    if not path.exists():
        raise UsageError(f"{origin} {path} does not exist; make it with "
                         f"`dali-launch data prepare --from IDX_DIR --to {path}`")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"{origin} {path} is not readable; fix its permissions")
    for split in SPLITS:
        check_lmdb(path / split, origin)


def check_lmdb(path: Path, origin: str) -> int:
    """Opens the LMDB read-only and checks every record; returns the number of records."""
    import lmdb

    if not (path / "data.mdb").is_file():
        raise UsageError(f"{path} is not an LMDB (no data.mdb); {origin} must hold training/ and testing/ "
                         f"as made by `dali-launch data prepare`")
    try:
        env = lmdb.open(str(path), readonly=True, lock=False, subdir=True)
    except lmdb.Error as e:
        raise UsageError(f"{path} is not a readable LMDB ({e}); re-create it with `dali-launch data prepare`")
    with env, env.begin() as txn:
        count = 0
        for key, value in txn.cursor():
            try:
                data_prepare.check_caffe2_record(value)
            except ValueError as e:
                raise UsageError(f"record {key.decode(errors='replace')} of {path} is corrupt ({e}); "
                                 f"re-create the data set with `dali-launch data prepare`") from None
            count += 1
    if count == 0:
        raise UsageError(f"{path} holds no records; point {origin} at a non-empty data set")
    return count
