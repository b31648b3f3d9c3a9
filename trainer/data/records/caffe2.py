"""Caffe2 LMDBs (`dali-launch data prepare`, DALI_extra's db/MNIST): records in LMDB key order, as
`fn.readers.caffe2` reads them. A record is TensorProtos{image STRING tensor, label INT32/FLOAT tensor}."""

from __future__ import annotations

import contextlib
import os

import numpy as np

from dali_launch.trainer.data import protobuf as pb
from dali_launch.trainer.data.images import image_size
from dali_launch.trainer.data.sample_scan import Listing, image_problem, stamp

_ENVS: dict = {}  # path -> lmdb.Environment: py-lmdb opens a path once per process; every reader shares it


class Caffe2Lmdb:
    def __init__(self, path: str):
        self.path = path
        self._keys = _keys(self._open())

    def _open(self):
        """This process's handle (sources are pickled into DALI's workers; handles are not)."""
        import lmdb

        if self.path not in _ENVS:
            _ENVS[self.path] = lmdb.open(self.path, readonly=True, lock=False, subdir=True, readahead=False)
        return _ENVS[self.path]

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> list[bytes]:
        return self._keys

    def read(self, index: int) -> tuple[np.ndarray, int]:
        with self._open().begin(buffers=False) as txn:
            image, label = parse(txn.get(self._keys[index]))
        return np.frombuffer(image, np.uint8), label


def _keys(env) -> list[bytes]:
    with env.begin() as txn:
        return list(txn.cursor().iternext(keys=True, values=False))  # ~0.1 s for 60,000 keys


def keys(path: str) -> list[bytes]:
    """The keys, the LMDB closed again (the launcher's checks open it after this)."""
    with opened(path) as env:
        return _keys(env)


@contextlib.contextmanager
def opened(path: str):
    """The LMDB at `path`: this process's handle if a source holds one (py-lmdb refuses a second open of a
    path: a global order's second pipeline screens the split after the first one's source opened it), else
    one closed again on leaving."""
    if path in _ENVS:
        yield _ENVS[path]
        return
    import lmdb

    with lmdb.open(path, readonly=True, lock=False, subdir=True) as env:
        yield env


def split_keys(kwargs: dict) -> list[bytes]:
    """The keys of the LMDB `fn.readers.caffe2(**kwargs)` reads, without opening a source (records.fingerprint_of)."""
    return keys(kwargs["path"])


def source(kwargs: dict) -> Caffe2Lmdb:
    return Caffe2Lmdb(kwargs["path"])


def first_image_size(path: str) -> tuple[int, int]:
    """(height, width) of the LMDB's first image: the launcher's checks found all of them alike."""
    with opened(path) as env, env.begin() as txn:
        _, record = next(iter(txn.cursor()))
    return image_size(parse(record)[0])


def parse(record: bytes) -> tuple[bytes, int]:
    """The image bytes and class id of one record (the launcher's data check rejects what this cannot read)."""
    protos = [value for number, value in pb.fields(record) if number == 1]
    image = dict(pb.fields(protos[0]))[6]
    label_fields = pb.fields(protos[1])
    kind = dict(label_fields).get(2, 1)  # FLOAT (1) is protobuf's default
    for number, value in label_fields:
        if kind == 2 and number == 4:  # int32_data, packed or not
            return image, pb.first_int(value)
        if kind == 1 and number == 3:
            return image, int(np.frombuffer(value, "<f4")[0])
    raise ValueError("a record without a label")


def listing(kwargs: dict) -> Listing:
    """The LMDB's records for the bad-sample scan, read through one handle that is closed again (or the
    process's own, `opened`): py-lmdb opens a path once per process, and the launcher's checks open it
    after this. No `without`: fn.readers.caffe2 reads every key (formats.py: skips=False)."""
    path, held = kwargs["path"], {}
    keys_ = keys(path)

    @contextlib.contextmanager
    def held_open():
        with opened(path) as env, env.begin(buffers=False) as txn:
            held["txn"] = txn
            yield
        held.clear()

    name = lambda i: f"record {keys_[i].decode(errors='replace')} of {path}"
    image = lambda i: parse(held["txn"].get(keys_[i]))[0]
    stamped = stamp(os.path.join(path, "data.mdb"))
    return Listing(path, len(keys_), stamped, name, lambda i: image_problem(image, i), opened=held_open, threads=False)
