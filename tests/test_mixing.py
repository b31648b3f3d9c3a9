"""--mixup and --cutmix on the device (tasks/mixing.py), as timm mixes: the targets sum to 1 and weigh each
image by exactly what of it the mixed image holds; the switch between the two; the same mixing whether
a step's rows are one device's (pmap) or every device's end to end (sharded)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dali_launch.trainer.tasks import mixing
from dali_launch.trainer.tasks.mixing import Mixing

ROWS, SIDE, CLASSES = 6, 16, 7  # an even count: no row is its own partner


def batch(seed: int = 0):
    """Distinct images (no two pixels of two images alike) and smoothed one-hot targets of distinct classes."""
    images = jax.random.uniform(jax.random.PRNGKey(seed), (ROWS, SIDE, SIDE, 3)) + jnp.arange(ROWS)[:, None, None, None]
    targets = optax.smooth_labels(jax.nn.one_hot(jnp.arange(ROWS) % CLASSES, CLASSES), 0.1)
    return images, targets


def weight(targets, mixed_targets) -> np.ndarray:
    """λ of each row, read back from its mixed targets: λ·y + (1-λ)·y_reversed, solved on the row's own class."""
    own, other = np.asarray(targets), np.asarray(targets[::-1])
    i = np.arange(ROWS)
    column = np.argmax(own, -1)
    return (np.asarray(mixed_targets)[i, column] - other[i, column]) / (own[i, column] - other[i, column])


@pytest.mark.parametrize("seed", range(3))
def test_mixup_blends_images_and_targets_by_one_weight(seed):
    images, targets = batch()
    mixed, goal = jax.jit(mixing.mix, static_argnums=3)(jax.random.PRNGKey(seed), images, targets, Mixing(mixup=0.2))
    np.testing.assert_allclose(goal.sum(-1), 1, rtol=1e-6)
    lam = weight(targets, goal)
    np.testing.assert_allclose(lam, lam[0], atol=1e-5)  # one λ per batch
    np.testing.assert_allclose(mixed, lam[0] * images + (1 - lam[0]) * images[::-1], atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_cutmix_targets_are_the_areas_each_image_keeps(seed):
    images, targets = batch()
    mixed, goal = jax.jit(mixing.mix, static_argnums=3)(jax.random.PRNGKey(seed), images, targets, Mixing(cutmix=1.0))
    np.testing.assert_allclose(goal.sum(-1), 1, rtol=1e-6)
    from_partner = np.asarray(mixed == images[::-1]).all(-1)  # (rows, H, W): pixels pasted from the reversed batch
    kept = np.asarray(mixed == images).all(-1)
    assert (from_partner ^ kept).all()  # every pixel is one image's or the other's
    rows, cols = np.nonzero(from_partner[0])
    if rows.size:  # one box, the same for every row
        box = np.zeros((SIDE, SIDE), bool)
        box[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] = True
        assert (from_partner == box).all()
    np.testing.assert_allclose(weight(targets, goal), kept.mean((1, 2)), atol=1e-5)


def test_both_switch_at_even_odds_and_repeat_for_a_key():
    images, targets = batch()
    mix = jax.jit(jax.vmap(mixing.mix, (0, None, None, None)), static_argnums=3)
    keys = jax.random.split(jax.random.PRNGKey(7), 400)
    mixed, _ = mix(keys, images, targets, Mixing(mixup=0.8, cutmix=1.0))
    pasted = np.asarray((mixed == images[::-1]).all(-1).any((1, 2, 3)) | (mixed == images).all((1, 2, 3, 4)))
    assert 0.4 < pasted.mean() < 0.6, pasted.mean()  # cutmix: whole pixels of either image; mixup: blends
    again, _ = mix(keys, images, targets, Mixing(mixup=0.8, cutmix=1.0))
    np.testing.assert_array_equal(mixed, again)


def test_a_sharded_steps_rows_mix_as_each_devices_batch_alone():
    """--parallel sharded sees 2 devices' batches end to end: each mixes within itself, with its device's key,
    exactly as --parallel pmap mixes each device's own rows."""
    (a, ta), (b, tb) = batch(1), batch(2)
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    both, goal = jax.jit(mixing.mix_devices, static_argnums=3)(
        keys, jnp.concatenate([a, b]), jnp.concatenate([ta, tb]), Mixing(0.8, 1.0)
    )
    one = jax.jit(mixing.mix, static_argnums=3)
    for k, (x, t) in enumerate(((a, ta), (b, tb))):
        mixed, target = one(keys[k], x, t, Mixing(0.8, 1.0))
        np.testing.assert_array_equal(both[k * ROWS : (k + 1) * ROWS], mixed)
        np.testing.assert_array_equal(goal[k * ROWS : (k + 1) * ROWS], target)
