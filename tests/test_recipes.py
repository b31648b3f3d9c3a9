"""Beyond the example: a user's own model and pipeline by entry point, and the contracts they are held to
(tests/test_recipe_runs.py: the CNN recipe and the JPEG-folder pipeline). Real runs, real data."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from catalogue import dataset, encoded_image, run_entry
from conftest import check_ok, dali_launch
from run_readers import only_run

from dali_launch.launcher.cli import main
from dali_launch.launcher.data import idx

MODELS = '''
import flax.linen as nn


class TinyConv(nn.Module):
    """Needs NHWC input: initialised on a flat (1, 784) zero vector it would break."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3), strides=2)(x))
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


def build(num_classes):
    return TinyConv(num_classes=num_classes)


def wide(num_classes):
    return TinyConv(num_classes=num_classes + 2)


def not_a_module(num_classes):
    return lambda x: x


def fixed():
    return TinyConv(num_classes=10)


def broken(num_classes):
    raise ValueError("no such width")
'''

PIPE = '''
from nvidia.dali import fn, types


def make(args):
    """Caffe2 LMDB -> grey 28x28x1 floats in [0, 1], plain integer class ids (no one-hot)."""
    jpegs, labels = fn.readers.caffe2(path=args.path, name="mine", **args.reader_args())
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="HWC")
    return images, labels


def no_shards(args):
    jpegs, labels = fn.readers.caffe2(path=args.path)
    return fn.decoders.image(jpegs, device="cpu"), labels


def two_args(args, extra):
    return make(args)


def one_hot_wide(args):
    images, labels = make(args)
    return images, fn.one_hot(labels, num_classes=args.num_classes + 2)


def images_only(args):
    return make(args)[0]


def two_readers(args):
    images, labels = make(args)
    more, _ = fn.readers.caffe2(path=args.path, name="more", **args.reader_args())
    return images + fn.decoders.image(more, device="cpu", output_type=types.GRAY), labels
'''


@pytest.fixture
def user_package(tmp_path):
    """`mypkg` in a folder of its own, as a user's code would be: on PYTHONPATH, not installed."""
    root = tmp_path / "user_code"
    (root / "mypkg").mkdir(parents=True)
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "models.py").write_text(textwrap.dedent(MODELS))
    (root / "mypkg" / "pipe.py").write_text(textwrap.dedent(PIPE))
    yield root
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]  # the next test's mypkg lives in another folder


@pytest.mark.slow
def test_own_model_and_pipeline_by_entry_point(user_package, mnist_lmdb, tmp_path):
    proc = dali_launch(
        "train",
        "--model",
        "mypkg.models:build",
        "--pipeline",
        "mypkg.pipe:make",
        "--data-dir",
        str(mnist_lmdb),
        "--epochs",
        "2",
        "--learning-rate",
        "0.05",
        "--run-root",
        str(tmp_path / "runs"),
        env={"PYTHONPATH": str(user_package)},
    )
    check_ok(proc)
    paths = only_run(tmp_path / "runs")
    epochs = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    assert all(e["train_samples"] == 8000 and e["test_count"] == 2000 for e in epochs)
    assert epochs[-1]["test_accuracy"] >= 0.9, epochs  # a 16-filter conv + linear layer on MNIST
    spec = json.loads(paths.config.read_text())
    assert (spec["model"]["model"], spec["data"]["pipeline"]) == ("mypkg.models:build", "mypkg.pipe:make")


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--model", "mypkg.models:nope", "--model mypkg.models:nope: module mypkg.models has no attribute nope"),
        ("--model", "mypkg.absent:build", "--model mypkg.absent:build: cannot import mypkg.absent"),
        (
            "--model",
            "transformer",
            "unknown --model transformer; use one of mlp, cnn, cnn-nnx, resnet18, resnet50, vit-ti16, vit-s16, "
            "vit-b16, unet, simclr-cnn, centernet, st-cnn, frame-mean, vivit-ti16, audio-cnn, or package.module:factory",
        ),
        (
            "--pipeline",
            "mypkg.pipe:MISSING",
            "--pipeline mypkg.pipe:MISSING: module mypkg.pipe has no attribute MISSING",
        ),
        (  # the module imports: only its factory is missing, and the callables it could be are named
            "--model",
            "mypkg.models",
            "--model mypkg.models names a module but no factory in it; write --model mypkg.models:FACTORY (its "
            "callables that take factory(num_classes=N): TinyConv, build, wide, not_a_module, broken)",
        ),
        (
            "--pipeline",
            "mypkg.pipe",
            "--pipeline mypkg.pipe names a module but no function in it; write --pipeline mypkg.pipe:FUNCTION (its "
            "callables that take function(args): make, no_shards, one_hot_wide, images_only, two_readers)",
        ),
        (
            "--model",
            "mypkg",
            "--model mypkg names a module but no factory in it; write --model mypkg:FACTORY (it has no callable "
            "that takes factory(num_classes=N))",
        ),
        (
            "--pipeline",
            "mypkg.absent",
            "unknown --pipeline mypkg.absent; use one of mnist, folders, tfrecord, webdataset, segmentation, detection, video, audio, views, or "
            "package.module:function",
        ),
    ],
)
def test_bad_entry_points_fail_before_anything_is_written(
    capsys, monkeypatch, user_package, tmp_path, flag, value, message
):
    monkeypatch.syspath_prepend(str(user_package))
    assert main(["train", flag, value, "--run-root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dali-launch: error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "flag, value, message",
    [
        pytest.param(
            "--model",
            "mypkg.models:not_a_module",
            "--model mypkg.models:not_a_module returned a function, "
            "neither a flax.linen.Module nor a flax.nnx.Module; the factory must return the module itself",
            id="factory-not-a-module",
        ),
        pytest.param(
            "--model",
            "mypkg.models:fixed",
            "--model mypkg.models:fixed cannot be called as "
            "factory(num_classes=N) (got an unexpected keyword argument 'num_classes'); see the contract in "
            "docs/models.md",
            id="factory-without-num-classes",
        ),
        pytest.param(
            "--model",
            "mypkg.models:broken",
            "--model mypkg.models:broken: factory(num_classes=10) raised ValueError: no such width; fix the factory",
            id="factory-raises",
        ),
        pytest.param(
            "--pipeline",
            "mypkg.pipe:two_args",
            "--pipeline mypkg.pipe:two_args cannot be called as "
            "function(args) (missing a required argument: 'extra'); see the contract in docs/data.md",
            id="pipeline-signature",
        ),
        pytest.param(  # these three were the task's, after the run directory was written (a "failed" run)
            "--pipeline",
            "mypkg.pipe:images_only",
            "--pipeline mypkg.pipe:images_only returned one DataNode; return two DataNodes: images, labels",
            id="pipeline-one-output",
        ),
        pytest.param(
            "--pipeline",
            "mypkg.pipe:no_shards",
            "--pipeline mypkg.pipe:no_shards: its reader does not read its shard padded to whole batches (its "
            "shard_id, num_shards, pad_last_batch, stick_to_shard differ from args.reader_args()'s); pass "
            "**args.reader_args() to it",
            id="pipeline-without-its-shard",
        ),
        pytest.param(
            "--pipeline",
            "mypkg.pipe:two_readers",
            "--pipeline mypkg.pipe:two_readers has 2 readers; use exactly one, given **args.reader_args()",
            id="pipeline-two-readers",
        ),
    ],
)
def test_broken_contracts_are_refused_before_anything_is_written(
    capsys, monkeypatch, nothing_starts, user_package, mnist_lmdb, tmp_path, flag, value, message
):
    """Checked by the launcher (the loaders' checks); they used to pass it and fail in the task, after the
    run directory was written."""
    monkeypatch.syspath_prepend(str(user_package))
    run_entry(
        capsys,
        tmp_path,
        ["train", flag, value, "--data-dir", str(mnist_lmdb), "--run-root", str(tmp_path / "runs")],
        message,
    )


@pytest.mark.parametrize(
    "args, data, message",
    [
        pytest.param(
            ["--pipeline", "mypkg.pipe:make"],
            [99] * 8,
            "--num-classes 10 but --pipeline mypkg.pipe:make gave training label 99; use --num-classes 100 or more",
            id="label-too-large",
        ),
        pytest.param(
            ["--pipeline", "mypkg.pipe:make"],
            (list(range(8)), [-1] * 8),
            "--pipeline mypkg.pipe:make gave testing label -1; labels are class ids 0..9, so fix the labels it returns",
            id="test-label-negative",
        ),
        pytest.param(
            ["--pipeline", "mypkg.pipe:make", "--parallel", "sharded", "--num-classes", "3"],
            list(range(8)),
            "--num-classes 3 but --pipeline mypkg.pipe:make gave training label 7; use --num-classes 8 or more",
            id="num-classes-too-small-sharded",
        ),
        pytest.param(
            ["--pipeline", "mypkg.pipe:make", "--model", "mypkg.models:wide"],
            list(range(8)),
            "--model "
            "mypkg.models:wide returns logits of shape (1, 12) for one sample but --num-classes is 10; make it "
            "return (batch, 10) (its last layer num_classes wide)",
            id="model-width",
        ),
        pytest.param(
            ["--pipeline", "mypkg.pipe:one_hot_wide"],
            list(range(8)),
            "the pipeline gave float labels (one-hot "
            "or soft targets) 12 wide but --num-classes is 10; make them 10 wide, or give class ids",
            id="one-hot-width",
        ),
        pytest.param(
            ["--pipeline", "mypkg.pipe:one_hot_wide", "--mixup", "0.2"],
            list(range(8)),
            "--mixup/--cutmix mix targets 10 wide (--num-classes 10), but the pipeline gave float labels (one-hot "
            "or soft targets) 12 wide; make them 10 wide, or give class ids",
            id="one-hot-width-mixup",
        ),
    ],
)
def test_what_only_the_task_can_see_is_one_line(user_package, tmp_path, args, data, message):
    """A pipeline of the user's own is not read before the run: its labels are checked in the steps
    (label_check.py), the model's width at its initialisation. One line and exit 2, not a run that
    ends with exit 0 having learnt nothing (labels) or a shape traceback (widths)."""
    train, test = data if isinstance(data, tuple) else (data, data)
    root = dataset(
        tmp_path,
        training=[idx.caffe2_record(encoded_image(), label) for label in train],
        testing=[idx.caffe2_record(encoded_image(), label) for label in test],
    )["data"]
    proc = dali_launch(
        "train",
        *args,
        "--data-dir",
        str(root),
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--eval-batch-size",
        "4",
        "--run-root",
        str(tmp_path / "runs"),
        env={"PYTHONPATH": str(user_package)},
    )
    assert (proc.returncode, proc.stderr) == (2, f"dali-launch: error: {message}\n"), proc.stderr[-3000:]
