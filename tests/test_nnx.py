"""Flax NNX models (trainer/model/nnx_model.py): docs/models.md's NNX example, read from the page itself so
that the documented code is the tested code, trained in 2 processes x 2 devices under both --parallel
values, cut mid-epoch and resumed bit for bit; and the adapter's modes, RNG streams and checkpoints
in-process."""

from __future__ import annotations

import json
import re
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import REPO, check_ok, dali_launch
from run_readers import only_run

DOCS = REPO / "docs" / "models.md"
SECTION = "## A Flax NNX model of your own"

# The docs' Net, and a SIGTERM to rank 0 at its STOP_AT-th call: every rank agrees at the next check
# point, checkpoints and stops, at a step fixed in advance (no race with a signal sent from outside).
STOPPER = """
import os
import signal

import jax
from flax import nnx

from nnx_models import Net

_calls = {"n": 0}


def _stop_rank_0(_):
    _calls["n"] += 1
    if jax.process_index() == 0 and _calls["n"] == int(os.environ.get("STOP_AT", "0")):
        os.kill(os.getpid(), signal.SIGTERM)


class Stopped(nnx.Module):
    def __init__(self, num_classes, *, rngs):
        self.net = Net(num_classes, rngs=rngs)

    def __call__(self, x):
        jax.debug.callback(_stop_rank_0, x[0, 0])
        return self.net(x)
"""


def docs_example() -> str:
    """The first Python block of docs/models.md's NNX section."""
    section = DOCS.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.search(r"^```python\n(.*?)^```", section, re.S | re.M).group(1)


@pytest.fixture(scope="module")
def user_code(tmp_path_factory):
    """The docs' block as the user's module nnx_models.py (on PYTHONPATH), and the stopper beside it."""
    root = tmp_path_factory.mktemp("nnx-user-code")
    (root / "nnx_models.py").write_text(docs_example())
    (root / "stopper.py").write_text(textwrap.dedent(STOPPER))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in ("nnx_models", "stopper"):
        sys.modules.pop(name, None)


def _checksums(paths) -> list[str]:
    return json.loads(paths.result.read_text())["checksums"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", ["pmap", "sharded"])
def test_the_docs_example_resumes_bit_exactly_in_2_processes(user_code, small_lmdb, tmp_path, mode):
    """2 processes x 2 CPU devices, BatchNorm statistics, dropout and the EMA: every replica identical;
    cut a few steps into epoch 0's 8 (sync points every 2 steps), resumed from there, it ends bit for
    bit as the run never cut (the same program both times). Small on purpose: 3 launches a mode, whose
    start-up is most of their time."""
    args = [
        *["--local", "--gpus-per-node", "4", "--processes", "2", "--init-timeout-s", "60", "--parallel", mode],
        *["--model", "stopper:Stopped", "--data-dir", str(small_lmdb), "--epochs", "2", "--batch-size", "25"],
        *["--ema-decay", "0.9", "--sync-every-steps", "2", "--checkpoint-every-steps", "0"],
    ]
    env = {"PYTHONPATH": str(user_code)}
    check_ok(dali_launch(*args, "--run-root", str(tmp_path / "whole"), env=env))
    whole = only_run(tmp_path / "whole")
    checksums = _checksums(whole)
    assert len(checksums) == 4 and len(set(checksums)) == 1, checksums

    # 2 local devices call the model each step (pmap: one program each; sharded: a shard each)
    cut = dali_launch(*args, "--run-root", str(tmp_path / "cut"), env={**env, "STOP_AT": "6"})
    assert cut.returncode != 0 and "checkpoint written" in cut.stderr, cut.stderr[-3000:]
    paths = only_run(tmp_path / "cut")
    meta = json.loads(next(paths.checkpoints.glob("*/meta/metadata")).read_text())
    assert meta["epoch"] == 0 and 0 < meta["calls_done"] < 8, meta  # mid-epoch (8 steps an epoch)
    print(f"{mode}: cut after {meta['calls_done']} of 8 steps")

    check_ok(dali_launch("--resume", str(paths.root), env=env))
    assert _checksums(paths) == checksums
    epochs = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    uncut = [json.loads(line) for line in whole.metrics.read_text().splitlines()]
    assert epochs[0]["resumed_at_call"] == meta["calls_done"] and [e["test_accuracy"] for e in epochs] == [
        e["test_accuracy"] for e in uncut
    ]
    assert epochs[-1]["test_accuracy"] >= 0.5, epochs  # 16 steps of 100 digits


# --- the adapter in this process: one CPU device ---------------------------------------------------


@pytest.fixture(scope="module")
def net(user_code):
    from dali_launch.trainer.model.registry import create_model

    model = create_model("nnx_models:Net", 10)
    key = jax.random.PRNGKey(0)
    init = jax.jit(lambda x: model.init_with_output({"params": key, "dropout": key}, x, train=False)[1])
    return model, init(jnp.zeros((1, 784)))  # jitted: eager initialisation takes seconds on 2 cores


def test_the_module_is_split_into_params_and_batch_stats(net):
    model, variables = net
    assert model.collections == ("batch_stats",) and set(variables) == {"params", "batch_stats"}
    assert set(variables["batch_stats"]["norm"]) == {"mean", "var"}
    assert variables["params"]["dense"]["kernel"].shape == (784, 256)


def test_training_mode_uses_batch_statistics_and_dropout_evaluation_neither(net):
    model, variables = net
    x = jax.random.normal(jax.random.PRNGKey(1), (16, 784)) + 3.0
    train = jax.jit(lambda v, x, k: model.apply(v, x, rngs={"dropout": k}, mutable=["batch_stats"], train=True))
    evaluate = jax.jit(lambda v, x: model.apply(v, x))
    a, updated = train(variables, x, jax.random.PRNGKey(2))
    b, _ = train(variables, x, jax.random.PRNGKey(2))
    c, _ = train(variables, x, jax.random.PRNGKey(3))
    assert np.array_equal(a, b) and not np.allclose(a, c)  # one mask per key, another for another key
    moved = updated["batch_stats"]["norm"]["mean"]
    assert np.all(moved != 0) and set(updated) == {"batch_stats"}  # momentum 0.9 towards the batch's means
    assert np.array_equal(evaluate(variables, x), evaluate(variables, x))  # no dropout
    # Evaluation normalises by the running averages: with their initial 0 and 1, the batch's own
    # means (about 3 here) are not removed, as training removes them.
    assert not np.allclose(evaluate(variables, x), a, atol=0.1)


def test_two_dropout_layers_draw_different_masks(user_code):
    """Every RNG stream is set from the step's key, each folded with its own index."""
    from flax import nnx

    from dali_launch.trainer.model import nnx_model

    class Twice(nnx.Module):
        def __init__(self, num_classes, *, rngs):
            self.first, self.second = nnx.Dropout(0.5, rngs=rngs), nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return jnp.stack([self.first(x), self.second(x)])

    model = nnx_model.build("Twice", Twice, 10)
    out = model.apply({"params": {}}, jnp.ones((1, 64)), rngs={"dropout": jax.random.PRNGKey(0)}, train=True)
    assert not np.array_equal(out[0], out[1])


def test_cnn_twin_checkpoints_round_trip(tmp_path):
    """cnn-nnx keeps its convolutions in an nnx.List: integer keys, which Orbax gets as strings."""
    import orbax.checkpoint as ocp
    from flax import serialization

    from dali_launch.trainer.config import DataConfig, TaskSpec, replaced
    from dali_launch.trainer.step.initial_state import create_train_state

    spec = replaced(TaskSpec(run_dir="unused", data=DataConfig()), model="cnn-nnx", ema_decay=0.9)
    state = create_train_state(spec, np.zeros((1, 784), np.float32), 10)
    assert set(state.params["convs"]) == {0, 1}
    with ocp.StandardCheckpointer() as saver:
        saver.save(tmp_path / "ckpt", serialization.to_state_dict(state))
    with ocp.StandardCheckpointer() as saver:
        restored = saver.restore(tmp_path / "ckpt", serialization.to_state_dict(state))
    back = serialization.from_state_dict(state, restored)
    assert jax.tree.structure(back) == jax.tree.structure(state)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(state)))


def test_bf16_accumulation_and_ema_step_an_nnx_model_as_a_linen_one(user_code):
    """The trainer's step on the docs' Net with --precision bf16, --accumulate-steps 2 and --ema-decay:
    float32 parameters, one update per 2 steps, statistics and EMA moved; --parallel auto sees state."""
    from dali_launch.trainer.config import DataConfig, TaskSpec, replaced
    from dali_launch.trainer.plan.step import parallel as resolve_parallel
    from dali_launch.trainer.step import sgd
    from dali_launch.trainer.step.initial_state import InitialState

    spec = TaskSpec(run_dir="unused", data=DataConfig())
    spec = replaced(spec, model="nnx_models:Net", precision="bf16", accumulate_steps=2, ema_decay=0.9)
    example = np.zeros((1, 784), np.float32)
    initial = InitialState(spec, example, 4)  # as set_up makes it: its shapes, then its values
    assert resolve_parallel("auto", bool(initial.shapes.collections), 2) == "pmap"  # BatchNorm on 2 devices
    state = initial.create()
    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.random((2, 8, 784), np.float32))
    labels = jnp.asarray(np.eye(10, dtype=np.float32)[rng.integers(0, 10, (2, 8))])
    steps = jax.jit(
        lambda s: sgd.sgd_steps(s, {"images": images, "labels": labels, "valid": jnp.ones((2, 8))}, sgd.JIT_JOB)
    )
    after, sums = steps(state)
    loss, count = sums["loss"], sums["count"]
    assert (int(after.step), int(after.slot), float(count)) == (1, 2, 16.0) and np.isfinite(float(loss))
    assert {x.dtype for x in jax.tree.leaves(after.params)} == {jnp.dtype("float32")}
    moved = lambda a, b: any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert moved(after.params, state.params) and moved(after.collections, state.collections)
    assert moved(after.ema, state.ema) and set(after.ema) == {"params", "batch_stats"}
