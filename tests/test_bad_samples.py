"""--bad-samples skip for real: a split's undecodable samples are left out of DALI's own readers (every
format), each other sample is trained on exactly once an epoch, and the run lists what it left out.
What `stop` says (one line before anything starts) is in the catalogue (test_catalogue_formats.py)."""

from __future__ import annotations

import collections
import json
import shutil

import numpy as np
import pytest
from catalogue import NOT_AN_IMAGE, replace_image, synth_set
from conftest import REPO, check_ok, dali_launch
from nvidia.dali import fn, pipeline_def
from nvidia.dali import tfrecord as tfrec
from run_readers import only_run, seen_prints
from test_formats_train import PIPELINES, SMALL_IMAGES, _whole_split

from dali_launch.trainer.data import bad_samples, formats, records, sample_scan
from dali_launch.trainer.data.records import tfrecord
from dali_launch.trainer.observe.replicas import fingerprints

TFRECORD_FEATURES = {
    tfrecord.IMAGE: tfrec.FixedLenFeature((), tfrec.string, ""),
    tfrecord.LABEL: tfrec.FixedLenFeature([1], tfrec.int64, -1),
}
SPOILS = {1: lambda jpeg: NOT_AN_IMAGE, 2: lambda jpeg: jpeg[:-200]}  # data synth's samples 1 and 2


def _spoiled(source_dir, tmp_path, fmt: str):
    """A copy of a data set with training samples 1 (a text file) and 2 (a cut JPEG) spoilt."""
    data = tmp_path / "data"
    shutil.copytree(source_dir, data)
    for sample, spoil in SPOILS.items():
        replace_image(data / "training", fmt, sample, spoil)
    return data


@pytest.mark.parametrize("fmt", ["folders", "tfrecord", "webdataset"])
def test_skip_leaves_exactly_the_bad_samples_out_of_dalis_reader(tmp_path, fmt, monkeypatch):
    """The screened reader arguments: DALI's native reader reads every good sample once and no bad one, and the
    --sample-order global source reads the very same samples."""
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    data = synth_set(fmt, lambda root: [replace_image(root / "training", fmt, s, f) for s, f in SPOILS.items()])(
        tmp_path
    )["data"]
    reader, kwargs = formats.reader_of(fmt, data / "training")
    before = records.open_source(reader, kwargs)
    screened, scan = bad_samples.screen(reader, kwargs, "skip", "2")
    assert scan == sample_scan.scan_split(reader, kwargs)
    assert len(scan.bad) == 2 and scan.count == len(before) == 6
    good = sorted(before.read(i)[0].tobytes() for i in range(6) if i not in {b.index for b in scan.bad})

    features = {"features": TFRECORD_FEATURES} if fmt == "tfrecord" else {}

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def read():
        return records.native(reader, getattr(fn.readers, reader)(**screened, **features, pad_last_batch=True))[0]

    pipe = read()
    pipe.build()
    (out,) = pipe.run()
    assert sorted(np.array(out[i]).tobytes() for i in range(4)) == good
    after = records.open_source(reader, screened)
    assert sorted(after.read(i)[0].tobytes() for i in range(len(after))) == good
    with pytest.raises(Exception, match="more than --max-bad-samples 1 allows"):
        bad_samples.screen(reader, kwargs, "skip", "1")


@pytest.mark.parametrize(
    "limit, count, expected",
    [("0.001", 6, 1), ("0.001", 999, 1), ("0.001", 5000, 5), ("0.5", 7, 3), ("0", 6, 0), ("0", 10**6, 0), ("3", 6, 3)],
)
def test_a_fraction_allows_at_least_one_bad_sample(limit, count, expected):
    """--max-bad-samples: a count as given; a fraction of the split, rounded down but never below one sample
    (0.001 of a split under 1,000 used to allow none: the README's --bad-samples skip refused a small set's
    one bad file); 0 allows none."""
    assert bad_samples.allowed(limit, count) == expected


def test_skip_with_the_default_limit_trains_a_small_set_without_its_bad_file(tmp_path):
    """The README's `train --pipeline folders --data-dir DIR --bad-samples skip`, --max-bad-samples left at its
    default, on a `data synth` set of 6 training images one of which is a text file named .jpg: it trains on
    the 5 others and lists the one in RUN/bad_samples.jsonl."""
    data = synth_set("folders", lambda root: replace_image(root / "training", "folders", 1, SPOILS[1]))(tmp_path)[
        "data"
    ]
    proc = dali_launch(
        "train", "--pipeline", "folders", "--data-dir", str(data), "--bad-samples", "skip",
        "--num-classes", "3", "--model", "cnn", "--image-size", "32", "--batch-size", "5", "--epochs", "1",
        "--run-root", str(tmp_path / "runs"),
    )  # fmt: skip
    check_ok(proc)
    paths = only_run(tmp_path / "runs")
    (listed,) = [json.loads(line) for line in paths.bad_samples.read_text().splitlines()]
    assert listed["sample"] == str(next((data / "training").glob("*/00000001.jpg")))
    (metrics,) = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    assert metrics["train_samples"] == 5 and metrics["bad_samples"] == 1


@pytest.mark.slow
def test_train_skips_and_lists_the_bad_samples(tmp_path):
    """`train --pipeline folders --bad-samples skip`: the two bad files are listed in bad_samples.jsonl and on
    the epoch line, the epoch trains on the 4 others, exit 0 (its batch of 3 is warned of: 33 % padding)."""
    data = synth_set(
        "folders", lambda root: [replace_image(root / "training", "folders", s, f) for s, f in SPOILS.items()]
    )(tmp_path)["data"]
    proc = dali_launch(
        "train", "--pipeline", "folders", "--data-dir", str(data), "--num-classes", "3", "--model", "cnn",
        "--image-size", "32", "--batch-size", "3", "--epochs", "1", "--bad-samples", "skip",
        "--max-bad-samples", "2", "--run-root", str(tmp_path / "runs"),
    )  # fmt: skip
    check_ok(proc)
    paths = only_run(tmp_path / "runs")
    listed = [json.loads(line) for line in paths.bad_samples.read_text().splitlines()]
    assert sorted(e["sample"] for e in listed) == sorted(
        str(next((data / "training").glob(f"*/{s:08d}.jpg"))) for s in SPOILS
    )
    assert "2 bad samples left out (bad_samples.jsonl)" in proc.stdout, proc.stdout
    # 4 samples in 2 calls of 3: a third of the epoch is padding, said before training
    assert "warning: 33% of each epoch is padding: 4 training samples fill 2 device calls of 3" in proc.stdout
    (metrics,) = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    assert metrics["train_samples"] == 4 and metrics["bad_samples"] == 2


def _spoilt_positions(fmt: str, split) -> set[int]:
    """Where SPOILS' samples stand in the reader's order of the split: synth's own order in its shards,
    class folder then file name for folders (DALI's file reader sorts both)."""
    if fmt != "folders":
        return set(SPOILS)
    files = sorted(split.glob("*/*.jpg"), key=lambda f: (f.parent.name, f.name))
    return {n for n, f in enumerate(files) if int(f.stem) in SPOILS}


def _named(fmt: str, split, sample: int) -> str:
    """How bad_samples.jsonl names synth sample `sample` of shard 0 (or its file)."""
    if fmt == "folders":
        return str(next(split.glob(f"*/{sample:08d}.jpg")))
    if fmt == "tfrecord":
        return f"record {sample} of {split / 'shard-00000.tfrecord'}"
    return f"of {split / 'shard-00000.tar'}"  # sample KEY of TAR


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", ["train", "local"])
@pytest.mark.parametrize("fmt", ["folders", "tfrecord", "webdataset"])
def test_skip_trains_every_other_sample_once(synth_sets, tmp_path, fmt, mode):
    """A text file named .jpg (sample 1) and a cut JPEG (sample 2) in each format, under `train` (1 device) and
    `--local` (2 processes × 1 device), read by the format's own reader through a pipeline of the user's
    (`args.read`: the trainer screens the split itself; augmentation off, so fingerprints can be compared):
    both listed in bad_samples.jsonl and on the epoch line, every other sample trained on once."""
    data = _spoiled(synth_sets[fmt], tmp_path, fmt)
    where = ["train"] if mode == "train" else ["--local", "--gpus-per-node", "2", "--processes", "2"]
    proc = dali_launch(
        *where, "--init-timeout-s", "60", "--pipeline", f"unaugmented_pipelines:{fmt}", *SMALL_IMAGES,
        "--data-dir", str(data), "--epochs", "1", "--record-samples", "--bad-samples", "skip",
        "--max-bad-samples", "0.01", "--run-root", str(tmp_path / "runs"),
        env={"PYTHONPATH": str(REPO / "tests")},
    )  # fmt: skip
    check_ok(proc)
    clean = synth_sets[fmt] / "training"
    images, labels = _whole_split(PIPELINES[fmt], clean)
    prints = fingerprints([np.stack(images), np.stack(labels)]).tolist()
    spoilt = _spoilt_positions(fmt, clean)
    assert len(spoilt) == len(SPOILS)
    paths = only_run(tmp_path / "runs")
    assert seen_prints(paths, 0) == collections.Counter(p for i, p in enumerate(prints) if i not in spoilt)
    listed = sorted(json.loads(line)["sample"] for line in paths.bad_samples.read_text().splitlines())
    assert len(listed) == len(SPOILS), listed
    for sample in SPOILS:
        assert any(_named(fmt, data / "training", sample) in name for name in listed), (sample, listed)
    (epoch_line,) = [line for line in proc.stdout.splitlines() if "epoch 0:" in line]
    assert "2 bad samples left out (bad_samples.jsonl)" in epoch_line, proc.stdout


def _corrupt_huffman_tables(jpeg: bytes) -> bytes:
    """A JPEG whose markers and sizes are sound but whose Huffman table is garbage: only a decode finds it."""
    data = bytearray(jpeg)
    at = data.find(b"\xff\xc4")
    data[at + 5 : at + 2 + int.from_bytes(data[at + 2 : at + 4], "big")] = b"\xab" * (
        int.from_bytes(data[at + 2 : at + 4], "big") - 3
    )
    return bytes(data)


def test_a_sample_corrupt_inside_is_named_from_dalis_error(tmp_path, monkeypatch):
    """The header check passes it; DALI's decoder fails on it, and its error becomes one line naming the file."""
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    data = synth_set("folders", lambda root: replace_image(root / "training", "folders", 1, _corrupt_huffman_tables))(
        tmp_path
    )["data"]
    split = str(data / "training")
    assert not sample_scan.scan_split("file", {"file_root": split}).bad

    @pipeline_def(batch_size=6, num_threads=1, device_id=None)
    def decode():
        jpegs, _ = fn.readers.file(file_root=split)
        return fn.decoders.image(jpegs, device="cpu")

    pipe = decode()
    pipe.build()
    with pytest.raises(RuntimeError) as e:
        pipe.run()
    line = str(bad_samples.decode_failure(e.value, split))
    assert line == (
        f"DALI could not decode {split}/1/00000001.jpg (Failed to decode sample #2 : 1/00000001.jpg), although "
        f"its header is sound: it is corrupt inside; replace or remove it (`dali-launch data check {data} "
        f"--decode` finds every such one), then resume the run"
    )
    assert bad_samples.decode_failure(RuntimeError("an unrelated failure"), split) is None


def test_a_global_order_run_that_skips_is_resumed_on_the_set_it_read(tmp_path, monkeypatch):
    """--sample-order global numbers the samples its readers read: with --bad-samples skip, the set without
    the bad ones, which is what --resume's check of the data set must fingerprint too."""
    from dali_launch.trainer.config import DataConfig, TaskSpec
    from dali_launch.trainer.data.global_order import fingerprint
    from dali_launch.trainer.resilience.start_point import fingerprint_read

    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    data = synth_set("folders", lambda root: replace_image(root / "training", "folders", 1, SPOILS[1]))(tmp_path)[
        "data"
    ]
    split = data / "training"
    config = lambda mode: DataConfig(data_dir=str(data), pipeline="folders", bad_samples=mode, max_bad_samples="1")
    spec = lambda mode: TaskSpec(run_dir="", data=config(mode))
    read = records.open_source("file", bad_samples.screen("file", {"file_root": str(split)}, "skip", "1")[0])
    assert fingerprint_read(spec("skip"), split, records) == fingerprint(read.keys()) != records.fingerprint_of(split)
    assert fingerprint_read(spec("stop"), split, records) == records.fingerprint_of(split)
    assert fingerprint(read.keys())["samples"] == 5
