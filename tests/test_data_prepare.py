"""`data prepare`: IDX in, Caffe2 LMDB out, read back through DALI's own caffe2 reader."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from conftest import write_idx
from nvidia.dali import fn, pipeline_def, types

from dali_launch.launcher.cli import main
from dali_launch.launcher.data import datasets, idx
from dali_launch.trainer.errors import UsageError


@pipeline_def(batch_size=500, num_threads=2, device_id=None)
def _read_back(path):
    jpegs, labels = fn.readers.caffe2(path=path, name="r")
    return fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY), labels


def _dali_read(path) -> tuple[np.ndarray, np.ndarray]:
    pipe = _read_back(path=str(path))
    pipe.build()
    n, images, labels = pipe.epoch_size("r"), [], []
    for _ in range(-(-n // 500)):
        im, lb = pipe.run()
        images += [np.array(im[i])[..., 0] for i in range(len(im))]
        labels += [int(np.array(lb[i])[0]) for i in range(len(lb))]
    return np.stack(images[:n]), np.array(labels[:n])


def test_round_trip_through_dali(mnist_lmdb):
    idx_images = idx.read_idx(datasets.EMBEDDED_IDX / "t10k-images-idx3-ubyte.gz")
    idx_labels = idx.read_idx(datasets.EMBEDDED_IDX / "t10k-labels-idx1-ubyte.gz")
    order = np.random.default_rng(0).permutation(10_000)
    test_ids, train_ids = np.sort(order[:2000]), np.sort(order[2000:])
    for split, ids in (("training", train_ids), ("testing", test_ids)):
        images, labels = _dali_read(mnist_lmdb / split)
        assert len(labels) == len(ids)
        np.testing.assert_array_equal(labels, idx_labels[ids])
        error = np.abs(images.astype(int) - idx_images[ids].astype(int))
        assert error.mean() < 1.5 and np.percentile(error, 99.9) < 40, (error.mean(), error.max())


def test_train_and_t10k_become_training_and_testing(tmp_path):
    src = tmp_path / "idx"
    src.mkdir()
    for prefix, n in (("train", 30), ("t10k", 12)):
        images = np.random.default_rng(n).integers(0, 255, (n, 28, 28), np.uint8)
        write_idx(src / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(src / f"{prefix}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8) % 10)
    report = idx.prepare(src, tmp_path / "out")
    assert report.counts == {"training": 30, "testing": 12}
    assert datasets.check_lmdb(tmp_path / "out" / "training", "x") == 30


def test_refuses_to_overwrite_and_leaves_nothing_on_failure(tmp_path, mnist_lmdb):
    with pytest.raises(UsageError, match="exists and is not empty"):
        idx.prepare(datasets.EMBEDDED_IDX, mnist_lmdb)
    src = tmp_path / "idx"
    src.mkdir()
    (src / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x03" + (5).to_bytes(4, "big")))
    write_idx(src / "t10k-labels-idx1-ubyte.gz", np.zeros(5, np.uint8))
    with pytest.raises(UsageError, match="truncated"):
        idx.prepare(src, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_record_checks_catch_what_dali_would_reject():
    good = idx.caffe2_record(b"\xff\xd8 jpeg bytes", 3)
    idx.check_caffe2_record(good)
    for bad in (b"garbage!", good[:-3], idx.caffe2_record(b"not an image", 1)):
        with pytest.raises(ValueError):
            idx.check_caffe2_record(bad)


def test_data_prepare_folders_writes_every_image_under_its_label(small_idx, tmp_path, capsys):
    idx, train_labels, test_labels = small_idx
    assert main(["data", "prepare", "--format", "folders", "--from", str(idx), "--to", str(tmp_path / "tree")]) == 0
    assert "training 250, testing 70" in capsys.readouterr().out
    for split, labels in (("training", train_labels), ("testing", test_labels)):
        folders = sorted(p.name for p in (tmp_path / "tree" / split).iterdir())
        assert folders == [str(c) for c in range(10)]  # every class, even where a split has none of it
        counts = {int(f): len(list((tmp_path / "tree" / split / f).glob("*.jpg"))) for f in folders}
        assert counts == {c: int(np.sum(labels == c)) for c in range(10)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]  # no temporary folder left beside it
