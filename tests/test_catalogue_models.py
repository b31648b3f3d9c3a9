"""The catalogue of bad inputs: `--model package.module:factory` of the user's own, Flax NNX and Linen,
refused by the launcher (model/registry.py's check, launcher/route/task_check.py) with one line naming the factory
and the fix, before anything is written or started. catalogue.py says how an entry runs; the module
here is on sys.path as a user's would be on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from catalogue import check_entry, class_folders

BAD_MODELS = """
import flax.linen as nn
import numpy as np
from flax import nnx


class Net(nnx.Module):
    def __init__(self, num_classes, *, rngs, inputs=784):
        self.dense = nnx.Linear(inputs, num_classes, rngs=rngs)

    def __call__(self, x):
        return self.dense(x.reshape(x.shape[0], -1))


def not_a_module(num_classes, rngs):
    return lambda x: x


def own_seed(num_classes):
    return Net(num_classes, rngs=nnx.Rngs(0))


class NoClasses(nnx.Module):
    def __init__(self, *, rngs):
        self.dense = nnx.Linear(784, 10, rngs=rngs)


class PlainArray(Net):
    def __init__(self, num_classes, *, rngs):
        super().__init__(num_classes, rngs=rngs)
        self.scale = np.ones(784, np.float32)


class PlainList(nnx.Module):
    def __init__(self, num_classes, *, rngs):
        self.layers = [nnx.Linear(784, num_classes, rngs=rngs)]


class DictAttribute(Net):
    def __init__(self, num_classes, *, rngs):
        super().__init__(num_classes, rngs=rngs)
        self.options = {"widths": [256, 128]}


def wide(num_classes, rngs):
    return Net(num_classes + 2, rngs=rngs)


def narrow(num_classes, rngs):
    return Net(num_classes, rngs=rngs, inputs=100)


def broken(num_classes, rngs):
    raise ValueError("no such width")


class LinenWide(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes + 1)(x)
"""

MODELS = [
    pytest.param(
        ["--model", "bad_models:not_a_module"],
        "--model bad_models:not_a_module returned a function, neither a flax.linen.Module nor a flax.nnx.Module; "
        "the factory must return the module itself",
        id="nnx-factory-returns-neither",
    ),
    pytest.param(
        ["--model", "bad_models:own_seed"],
        "--model bad_models:own_seed returned a flax.nnx.Module but takes no rngs; give it an `rngs` parameter "
        "and build the module with it: the trainer calls factory(num_classes=N, rngs=nnx.Rngs(seed))",
        id="nnx-factory-without-rngs",
    ),
    pytest.param(
        ["--model", "bad_models:NoClasses"],
        "--model bad_models:NoClasses cannot be called as factory(num_classes=N, rngs=nnx.Rngs(seed)) "
        "(got an unexpected keyword argument 'num_classes'); see the contract in docs/models.md",
        id="nnx-class-without-num-classes",
    ),
    pytest.param(
        ["--model", "bad_models:broken"],
        "--model bad_models:broken: factory(num_classes=10, rngs=nnx.Rngs(seed)) raised ValueError: no such "
        "width; fix the factory",
        id="nnx-factory-raises",
    ),
    pytest.param(
        ["--model", "bad_models:PlainArray"],
        "--model bad_models:PlainArray keeps a plain array at scale, outside any nnx.Variable; wrap it in "
        "nnx.Param (trained) or nnx.BatchStat (kept, not trained)",
        id="nnx-state-plain-array",
    ),
    pytest.param(
        ["--model", "bad_models:DictAttribute"],
        "--model bad_models:DictAttribute: nnx.split cannot split its module into a static graph and arrays "
        "(TypeError: unhashable type: 'dict'); keep static attributes hashable (tuples, not lists or dicts) "
        "and wrap arrays in nnx.Variable, lists of layers in nnx.List",
        id="nnx-state-unhashable",
    ),
    pytest.param(
        ["--model", "bad_models:PlainList"],
        "--model bad_models:PlainList: factory(num_classes=10, rngs=nnx.Rngs(seed)) raised ValueError: Found data "
        "on value of type '<class 'list'>' assigned to static attribute 'layers' of Pytree type "
        "'<class 'bad_models.PlainList'>'. Static attributes should not contain data values. Consider one of the "
        "following options: 1. If the attribute is meant to be static, remove the data values of type(s): Linear "
        "2. If the attribute is meant to be data, wrap the value with nnx.data  on assignment: "
        "_.layers = nnx.data(...) 3. Alternatively, annotate the class attribute with nnx.data: class "
        "PlainList(Module): layers: list = nnx.data() 4. If the container is a list or dict, try using "
        "nnx.List(...) or nnx.Dict(...) instead. 5. Disable pytree for this class: class PlainList(Module, "
        "pytree=False):; fix the factory",
        id="nnx-layers-in-a-list",  # Flax's advice whole, in the one line
    ),
    pytest.param(
        ["--model", "bad_models:wide"],
        "--model bad_models:wide returns logits of shape (1, 12) for one sample but --num-classes is 10; make "
        "it return (batch, 10) (its last layer num_classes wide)",
        id="nnx-logits-width",
    ),
    pytest.param(
        ["--model", "bad_models:narrow"],
        "--model bad_models:narrow failed on one sample of shape (1, 784) (TypeError: dot_general requires "
        "contracting dimensions to have the same shape, got (784,) and (100,).); make it take the pipeline's "
        "images",
        id="nnx-input-shape",
    ),
    pytest.param(
        ["--model", "bad_models:LinenWide", "--num-classes", "4"],
        "--model bad_models:LinenWide returns logits of shape (1, 5) for one sample but --num-classes is 4; "
        "make it return (batch, 4) (its last layer num_classes wide)",
        id="linen-logits-width",
    ),
]


def test_a_built_in_model_that_cannot_take_the_images_names_the_one_that_can(capsys, place, nothing_starts):
    """cnn-nnx is built for 28x28 grey digits: on RGB crops the fix is another built-in, not the model's code."""
    args = ["train", "--model", "cnn-nnx", "--pipeline", "folders", "--num-classes", "3", "--image-size", "32"]
    message = (
        "--model cnn-nnx failed on one sample of shape (1, 32, 32, 3) (ValueError: conv_general_dilated lhs feature "
        "dimension size divided by feature_group_count must equal the rhs input feature dimension size, but 3 // 1 "
        "!= 1.); cnn-nnx takes 28x28 grey images (the mnist pipeline's); use --model cnn, its Linen twin, at any size"
    )
    check_entry(capsys, place, [*args, "--data-dir", "{data}", "--run-root", "{root}"], message, class_folders(3))


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory):
    """bad_models.py in a folder of its own, outside the folder an entry must leave as it was."""
    root = tmp_path_factory.mktemp("bad-models")
    (root / "bad_models.py").write_text(textwrap.dedent(BAD_MODELS))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    sys.modules.pop("bad_models", None)


@pytest.mark.parametrize("args, message", MODELS)
def test_models(capsys, place, nothing_starts, bad_models, args, message):
    check_entry(capsys, place, ["train", *args, "--data-dir", "{data}", "--run-root", "{root}"], message)


def test_the_models_check_starts_no_jax_backend(bad_models, tmp_path):
    """The factory and the model's logits are evaluated abstractly (jax.eval_shape): a launcher on a GPU
    login node takes no device. In a fresh process: this one's JAX has started long ago."""
    code = (
        "import sys; from jax._src import xla_bridge; from dali_launch.launcher.cli import main; "
        f"code = main(['train', '--model', 'bad_models:wide', '--run-root', {str(tmp_path)!r}]); "
        "print(code, bool(xla_bridge._backends))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(bad_models)},
    )
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr[-2000:]
    assert "returns logits of shape (1, 12)" in proc.stderr
