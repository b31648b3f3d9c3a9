"""The catalogue of bad inputs: a `--pipeline package.module:function` of the user's own whose graph breaks the
contract, refused by the launcher's preparation (trainer/data/graph_check.py defines it on the CPU for each
split, then runs it for one sample) with one line, before anything is written or started: what it returns, its
reader and how that is sharded, what `args.read` refuses while it is defined (a bad sample), the function's own
failure as it defines the graph or as the graph runs, outputs given in each other's places, and a graph on
the GPU of a machine without one. Each of these was the task's refusal, after the run directory was written,
or a traceback. catalogue.py says how an entry runs; the module
here is on sys.path as a user's would be on PYTHONPATH."""

from __future__ import annotations

import glob
import sys
import textwrap

import pytest
from catalogue import NOT_AN_IMAGE, check_entry, dataset, good_records, one_bad

from dali_launch.launcher.data import idx
from dali_launch.trainer.data import graph_check
from dali_launch.trainer.data.contract import PipelineArgs

BAD_PIPELINES = """
import dataclasses

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


def read_by_a_copy(args):
    jpegs, labels = dataclasses.replace(args, training=False).read("caffe2", path=args.path)
    return _decoded(jpegs), labels


def read_and_a_reader(args):
    images, labels = through_read(args)
    more, _ = fn.readers.caffe2(path=args.path, **args.reader_args())
    return images + _decoded(more), labels


def undefined_operator(args):
    images, labels = make(args)
    return fn.no_such_op(images), labels


def shapes_that_do_not_join(args):
    images, labels = make(args)
    return fn.cat(images, fn.resize(images, size=[5, 5]), axis=2), labels


def swapped(args):
    images, labels = make(args)
    return labels, images


def on_the_gpu(args):
    images, labels = make(args)
    return images.gpu(), labels.gpu()
"""

CONTRACT = "return two DataNodes: images, labels"
UNSHARDED = "its reader does not read its shard padded to whole batches (its {} differ from args.reader_args()'s)"
NOT_READ = (
    "does not read through args.read(...), which --sample-order global needs; use args.read, or --sample-order shards"
)
NOT_DECODED = "is not an image DALI decodes (JPEG, PNG, BMP, TIFF, WebP, PNM, JPEG 2000)"
REMAKE = "re-create the data set without it (`dali-launch data prepare --from IDX_DIR --to DIR`)"
GLOBAL = ("--sample-order", "global")
FIX = "fix the pipeline function"


def line(text: str) -> str:
    """`bad_pipes.py line N`: where `text` stands in the module the entries import."""
    return f"bad_pipes.py line {textwrap.dedent(BAD_PIPELINES).splitlines().index(text) + 1}"


def entry(function: str, message: str, make=None, flags=(), id: str = ""):
    """--pipeline bad_pipes:`function` (and `flags`) on the data set `make` makes (else a good one): `message`,
    after `--pipeline bad_pipes:FUNCTION` unless it names something else."""
    said = message if message.startswith("record ") else f"--pipeline bad_pipes:{function}{message}"
    return pytest.param(function, list(flags), said, make, id=id or function.replace("_", "-"))


PIPELINES = [
    entry("returns_nothing", f" returned None; {CONTRACT}"),
    entry("one_output", f" returned 1 output; {CONTRACT}"),
    entry("three_outputs", f" returned 3 outputs; {CONTRACT}"),
    # the task's DALI made a constant of it, outside the pipeline: a traceback and exit 1
    entry("constant_labels", f" returned an int as its labels; {CONTRACT}"),
    entry("array_images", f" returned a ndarray as its images; {CONTRACT}"),
    entry("no_reader", " has 0 readers; use exactly one, given **args.reader_args()"),
    entry(
        "unsharded",
        f": {UNSHARDED.format('shard_id, num_shards, pad_last_batch, stick_to_shard')}; pass **args.reader_args() to it",
    ),
    entry("unpadded", f": {UNSHARDED.format('pad_last_batch, stick_to_shard')}; pass **args.reader_args() to it"),
    entry("make", f" {NOT_READ}", flags=GLOBAL, id="global-order-without-args-read"),
    entry("read_and_a_reader", f" {NOT_READ}", flags=GLOBAL, id="global-order-with-a-reader-beside-args-read"),
    entry(
        "through_read",
        f"record 00000001 of {{data}}/training {NOT_DECODED}; {REMAKE}",
        one_bad(idx.caffe2_record(NOT_AN_IMAGE, 1)),
        id="read-a-bad-training-sample",
    ),
    # the function's own failure, as it defines the graph and as the graph runs one batch: where, and what it met
    entry(
        "undefined_operator",
        f" failed defining its graph ({line('    return fn.no_such_op(images), labels')}: AttributeError: module "
        f"'nvidia.dali.fn' has no attribute 'no_such_op'); {FIX}",
    ),
    entry(
        "shapes_that_do_not_join",
        f" failed running one batch on the CPU (fn.cat at "
        f"{line('    return fn.cat(images, fn.resize(images, size=[5, 5]), axis=2), labels')}: Concatenated tensors "
        f"can differ in size only in the concatenation axis (2).); {FIX}, or the data it reads",
    ),
    entry(
        "swapped",
        " gives labels of (28, 28, 1) float32 and images of (1,) int32 a sample: images and labels swapped; return "
        "images, labels, in that order",
    ),
    pytest.param(
        "on_the_gpu",
        [],
        '--pipeline bad_pipes:on_the_gpu puts its outputs on the GPU (its own device="mixed" or .gpu()), but this '
        "machine has no NVIDIA GPU (no /dev/nvidia*); run it on a GPU machine, or give its decoders "
        "**args.decoder_args()",
        None,
        id="on-the-gpu-of-a-machine-without-one",
        marks=pytest.mark.skipif(bool(glob.glob("/dev/nvidia[0-9]*")), reason="this machine has a GPU"),
    ),
    entry(  # the testing split's graph is defined too
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


@pytest.mark.parametrize("function, flags, message, make", PIPELINES)
def test_pipelines(capsys, place, nothing_starts, bad_pipes, function, flags, message, make):
    args = ["train", "--pipeline", f"bad_pipes:{function}", *flags, "--data-dir", "{data}", "--run-root", "{root}"]
    check_entry(capsys, place, args, message, make)


@pytest.mark.parametrize(
    "function, shard_order",
    [("make", True), ("through_read", True), ("through_read", False), ("read_by_a_copy", False)],
)
def test_pipelines_that_keep_the_contract_pass(tmp_path, monkeypatch, bad_pipes, function, shard_order):
    """The same check passes a reader given **args.reader_args() (the shard order) and args.read (either order;
    a copy of args reads for it too), for either split, defined as the launcher defines them: shard 1 of 2,
    where a reader left unsharded would read 0 of 1."""
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    data = dataset(tmp_path)["data"]
    for split in ("training", "testing"):
        args = PipelineArgs(str(data / split), 1, 2, 1, split == "training", False, "cpu", 0, 10, 28)
        graph_check.check(f"bad_pipes:{function}", args, shard_order)
