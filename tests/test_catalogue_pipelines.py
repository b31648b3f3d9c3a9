"""The catalogue of bad inputs: a `--pipeline package.module:function` of the user's own whose graph breaks the
contract, refused by the launcher's preparation (trainer/data/graph_check.py defines it on the CPU for each
split) with one line, before anything is written or started: what it returns, its reader and how that is
sharded, and what `args.read` refuses while it is defined (a bad sample). Each of these was the task's
refusal, after the run directory was written, or a traceback. catalogue.py says how an entry runs; the module
here is on sys.path as a user's would be on PYTHONPATH."""

from __future__ import annotations

import sys
import textwrap

import pytest
from catalogue import NOT_AN_IMAGE, check_entry, dataset, good_records, one_bad

from dali_launch.launcher.data import idx
from dali_launch.trainer.data import graph_check
from dali_launch.trainer.data.contract import PipelineArgs

BAD_PIPELINES = """
import numpy as np
from nvidia.dali import fn, types


def _decoded(jpegs):
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
    return fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="HWC")


def make(args):
    jpegs, labels = fn.readers.caffe2(path=args.path, **args.reader_args())
    return _decoded(jpegs), labels


def returns_nothing(args):
    make(args)


def one_output(args):
    return make(args)[:1]


def three_outputs(args):
    images, labels = make(args)
    return images, labels, labels


def constant_labels(args):
    return make(args)[0], 3


def array_images(args):
    return np.zeros((28, 28, 1), np.float32), make(args)[1]


def no_reader(args):
    images = fn.random.uniform(shape=[28, 28, 1])
    return images, fn.cast(fn.random.uniform(range=[0, 10]), dtype=types.INT32)


def unsharded(args):
    jpegs, labels = fn.readers.caffe2(path=args.path)
    return _decoded(jpegs), labels


def unpadded(args):
    jpegs, labels = fn.readers.caffe2(
        path=args.path, shard_id=args.shard_id, num_shards=args.num_shards, random_shuffle=args.training
    )
    return _decoded(jpegs), labels


def through_read(args):
    jpegs, labels = args.read("caffe2", path=args.path)
    return _decoded(jpegs), labels
"""

CONTRACT = "return two DataNodes: images, labels"
UNSHARDED = "its reader does not read its shard padded to whole batches (its {}"
NOT_DECODED = "is not an image DALI decodes (JPEG, PNG, BMP, TIFF, WebP, PNM, JPEG 2000)"
REMAKE = "re-create the data set without it (`dali-launch data prepare --from IDX_DIR --to DIR`)"

PIPELINES = [
    pytest.param(
        "returns_nothing", f"--pipeline bad_pipes:returns_nothing returned None; {CONTRACT}", None, id="returns-nothing"
    ),
    pytest.param("one_output", f"--pipeline bad_pipes:one_output returned 1 output; {CONTRACT}", None, id="one-output"),
    pytest.param(
        "three_outputs", f"--pipeline bad_pipes:three_outputs returned 3 outputs; {CONTRACT}", None, id="three-outputs"
    ),
    pytest.param(  # the task's DALI made a constant of it, outside the pipeline: a traceback and exit 1
        "constant_labels",
        f"--pipeline bad_pipes:constant_labels returned an int as its labels; {CONTRACT}",
        None,
        id="constant-labels",
    ),
    pytest.param(
        "array_images",
        f"--pipeline bad_pipes:array_images returned a ndarray as its images; {CONTRACT}",
        None,
        id="array-images",
    ),
    pytest.param(
        "no_reader",
        "--pipeline bad_pipes:no_reader has 0 readers; use exactly one, given **args.reader_args()",
        None,
        id="no-reader",
    ),
    pytest.param(
        "unsharded",
        f"--pipeline bad_pipes:unsharded: {UNSHARDED.format('shard_id, num_shards, pad_last_batch, stick_to_shard')} "
        "differ from args.reader_args()'s); pass **args.reader_args() to it",
        None,
        id="unsharded",
    ),
    pytest.param(
        "unpadded",
        f"--pipeline bad_pipes:unpadded: {UNSHARDED.format('pad_last_batch, stick_to_shard')} differ from "
        "args.reader_args()'s); pass **args.reader_args() to it",
        None,
        id="unpadded",
    ),
    pytest.param(
        "through_read",
        f"record 00000001 of {{data}}/training {NOT_DECODED}; {REMAKE}",
        one_bad(idx.caffe2_record(NOT_AN_IMAGE, 1)),
        id="read-a-bad-training-sample",
    ),
    pytest.param(  # the testing split's graph is defined too
        "through_read",
        f"record 00000002 of {{data}}/testing {NOT_DECODED}; {REMAKE}",
        lambda tmp: dataset(tmp, testing=[*good_records(2), idx.caffe2_record(NOT_AN_IMAGE, 2), *good_records(1)]),
        id="read-a-bad-testing-sample",
    ),
]


@pytest.fixture(scope="module")
def bad_pipes(tmp_path_factory):
    """bad_pipes.py in a folder of its own, outside the folder an entry must leave as it was."""
    root = tmp_path_factory.mktemp("bad-pipes")
    (root / "bad_pipes.py").write_text(textwrap.dedent(BAD_PIPELINES))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    sys.modules.pop("bad_pipes", None)


@pytest.mark.parametrize("function, message, make", PIPELINES)
def test_pipelines(capsys, place, nothing_starts, bad_pipes, function, message, make):
    args = ["train", "--pipeline", f"bad_pipes:{function}", "--data-dir", "{data}", "--run-root", "{root}"]
    check_entry(capsys, place, args, message, make)


@pytest.mark.parametrize("shard_order", [True, False], ids=["shards", "global"])
@pytest.mark.parametrize("function", ["make", "through_read"])
def test_pipelines_that_keep_the_contract_pass(tmp_path, monkeypatch, bad_pipes, function, shard_order):
    """The same check passes a reader given **args.reader_args() and one of args.read's, for either split,
    defined as the launcher defines them (shard 1 of 2, where a reader left unsharded would read 0 of 1)."""
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    data = dataset(tmp_path)["data"]
    for split in ("training", "testing"):
        args = PipelineArgs(str(data / split), 1, 2, 1, split == "training", False, "cpu", 0, 10, 28)
        graph_check.check(f"bad_pipes:{function}", args, shard_order)
