"""The optimizer, schedules, weight decay, accumulation and the built-in ResNet-50: pure functions and
one step function called directly on the CPU, no DALI."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.traverse_util import flatten_dict

from dali_launch.trainer.config import OptimizerConfig
from dali_launch.trainer.model.forward import Forward
from dali_launch.trainer.model.resnet import ResNet, resnet50
from dali_launch.trainer.step import optim, sgd
from dali_launch.trainer.step.state import Recipe, TrainState
from dali_launch.trainer.tasks.classification import classification

SLOTS = 40  # SGD steps per epoch


EPOCHS = 10


def _train(**changes) -> OptimizerConfig:
    return dataclasses.replace(OptimizerConfig(learning_rate=0.4), **changes)


@pytest.mark.parametrize("steps", [0, 1, 7, 39, 40, 41, 150, 399])
def test_warmup_cosine_is_optaxs_own(steps):
    config = _train(schedule="cosine", warmup_epochs=1.0)
    reference = optax.warmup_cosine_decay_schedule(0.0, 0.4, warmup_steps=SLOTS, decay_steps=10 * SLOTS)
    assert float(optim.schedule(config, EPOCHS, SLOTS)(steps)) == pytest.approx(
        float(reference(steps)), rel=1e-6, abs=1e-9
    )


@pytest.mark.parametrize("steps, expected", [(0, 0.0), (5, 0.2), (10, 0.4), (205, 0.2), (400, 0.0)])
def test_warmup_linear_in_steps(steps, expected):
    """Warm-up over 10 steps to 0.4, then a straight line to 0 at the run's 400th step."""
    config = _train(schedule="linear", warmup_steps=10)
    reference = optax.join_schedules([optax.linear_schedule(0.0, 0.4, 10), optax.linear_schedule(0.4, 0.0, 390)], [10])
    assert float(optim.schedule(config, EPOCHS, SLOTS)(steps)) == pytest.approx(expected, abs=1e-6)
    assert float(optim.schedule(config, EPOCHS, SLOTS)(steps)) == pytest.approx(float(reference(steps)), abs=1e-7)


@pytest.mark.parametrize("steps, expected", [(0, 0.4), (119, 0.4), (120, 0.04), (279, 0.04), (280, 0.004)])
def test_step_decay_at_given_epochs(steps, expected):
    config = _train(schedule="step", decay_epochs="3,7")
    reference = optax.piecewise_constant_schedule(0.4, {3 * SLOTS: 0.1, 7 * SLOTS: 0.1})
    assert float(optim.schedule(config, EPOCHS, SLOTS)(steps)) == pytest.approx(expected, rel=1e-6)
    assert float(optim.schedule(config, EPOCHS, SLOTS)(steps)) == float(reference(steps))


def test_accumulation_counts_optimizer_updates():
    """With 4 steps accumulated an epoch of 40 SGD steps is 10 updates: warm-up of 1 epoch = 10 updates."""
    config = _train(schedule="cosine", warmup_epochs=1.0, accumulate_steps=4)
    reference = optax.warmup_cosine_decay_schedule(0.0, 0.4, warmup_steps=10, decay_steps=100)
    for n in (0, 5, 10, 50, 99):
        assert float(optim.schedule(config, EPOCHS, SLOTS)(n)) == pytest.approx(float(reference(n)), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("name", ["sgd", "nesterov", "adamw", "lamb", "lars"])
def test_weight_decay_leaves_biases_and_norm_scales_alone(name):
    """Zero gradients: only weight decay moves anything, and only kernels move."""
    model = ResNet(num_classes=10, stages=(1,), width=8)
    variables = model.init(jax.random.PRNGKey(0), jnp.ones((2, 28, 28, 1)), train=False)
    params = variables["params"]
    tx = optim.optimizer(_train(optimizer=name, weight_decay=0.1))
    updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
    moved = {k: bool(jnp.any(u != 0)) for k, u in flatten_dict(updates, sep="/").items()}
    assert {k for k, m in moved.items() if m} == {k for k in moved if k.endswith("kernel")}, moved
    assert any(k.endswith("scale") for k in moved) and any(k.endswith("bias") for k in moved)


def test_clipping_bounds_the_update():
    params = {"w": jnp.ones((3, 3))}
    tx = optim.optimizer(_train(momentum=0.0, clip_norm=0.5))
    updates, _ = tx.update({"w": jnp.full((3, 3), 100.0)}, tx.init(params), params)
    assert float(optax.tree.norm(updates)) == pytest.approx(0.5, rel=1e-5)


class _Tiny(nn.Module):
    num_classes: int = 3

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(nn.tanh(nn.Dense(16)(x)))


def _state(accumulate: int, optimizer: str) -> TrainState:
    model = _Tiny()
    variables = model.init(jax.random.PRNGKey(1), jnp.zeros((1, 5)))
    config = _train(
        optimizer=optimizer,
        learning_rate=0.05,
        accumulate_steps=accumulate,
        schedule="cosine",
        warmup_steps=1,
        clip_norm=1.0,
        weight_decay=0.01,
    )
    return TrainState.create(
        dict(variables),
        jax.random.PRNGKey(2),
        Forward(model),
        optim.optimizer(config),
        optim.schedule(config, EPOCHS, 8),
        Recipe(accumulate_steps=accumulate, task=classification(num_classes=3, label_smoothing=0.1)),
    )


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_accumulating_4_steps_is_one_step_of_4x_the_batch(optimizer):
    """Two updates, each of 4 steps of B=6 (one of them partly padding, so the steps' sample counts
    differ) against two steps of 24: the same parameters within float32 rounding (rtol 1e-5)."""
    rng = np.random.default_rng(0)
    images = rng.normal(size=(8, 6, 5)).astype(np.float32)
    labels = rng.integers(0, 3, size=(8, 6)).astype(np.int32)
    valid = np.ones((8, 6), np.float32)
    valid[2, 2:] = 0  # padding: this step has 2 real samples, its group 20
    valid[7, :] = 0  # a padding-only step
    small = _state(4, optimizer)
    for group in (slice(0, 4), slice(4, 8)):
        batch = {"images": images[group], "labels": labels[group], "valid": valid[group]}
        small, _ = jax.jit(sgd.sgd_steps, static_argnums=2)(small, batch, sgd.JIT_JOB)
    big = _state(1, optimizer)
    for group in (slice(0, 4), slice(4, 8)):
        batch = {
            "images": images[group].reshape(1, 24, 5),
            "labels": labels[group].reshape(1, 24),
            "valid": valid[group].reshape(1, 24),
        }
        big, _ = jax.jit(sgd.sgd_steps, static_argnums=2)(big, batch, sgd.JIT_JOB)
    assert int(small.step) == int(big.step) == 2 and int(small.slot) == 8
    for name, a in flatten_dict(small.params, sep="/").items():
        np.testing.assert_allclose(a, flatten_dict(big.params, sep="/")[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_resnet50_is_the_standard_model():
    """ResNet-50 v1.5 at 224x224 and 1,000 classes has 25,557,032 parameters (torchvision's count);
    each bottleneck's last BatchNorm scale starts at zero, every other at one."""
    shapes = jax.eval_shape(
        lambda x: resnet50(1000).init(jax.random.PRNGKey(0), x, train=False), jnp.zeros((1, 224, 224, 3))
    )
    params = flatten_dict(shapes["params"], sep="/")
    assert sum(int(np.prod(p.shape)) for p in params.values()) == 25_557_032
    assert len(flatten_dict(shapes["batch_stats"])) == 2 * 53  # mean and var of 53 BatchNorms
    blocks = {k.split("/")[0] for k in params if k.startswith("Bottleneck")}
    assert len(blocks) == 16
    variables = ResNet(num_classes=10, stages=(1, 1), width=8).init(
        jax.random.PRNGKey(0), jnp.ones((1, 32, 32, 3)), train=False
    )
    scales = {k: v for k, v in flatten_dict(variables["params"], sep="/").items() if k.endswith("scale")}
    assert all(float(jnp.max(jnp.abs(v))) == 0 for k, v in scales.items() if "BatchNorm_2/" in k), scales.keys()
    assert all(float(jnp.min(v)) == 1 for k, v in scales.items() if "BatchNorm_2/" not in k)
