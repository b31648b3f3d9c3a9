"""model/pooling.py: the stem's 3x3/2 max pool whose gradient needs no scatter (--pool-grad masks), the same
pool and gradient as JAX's own, and --pool-grad auto's rule (plan/step.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from plans import planned

from dali_launch.trainer.config import TaskSpec, replaced
from dali_launch.trainer.model.pooling import max_pool_3x3_s2, stem_pool
from dali_launch.trainer.model.registry import create_model
from dali_launch.trainer.plan.step import pool_grad


def jax_pool(x):
    return nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")


@pytest.mark.parametrize(
    "shape, dtype, ties",
    [((2, 9, 8, 3), jnp.float32, False), ((2, 12, 11, 4), jnp.float32, True), ((2, 16, 16, 5), jnp.bfloat16, True)],
)
def test_the_pool_and_its_gradient_are_jaxs(shape, dtype, ties):
    """Odd and even sides (SAME's padding on one side or both); with ties, the gradient goes to the first maximum
    of each window in row-major order, as select_and_scatter's `ge` sends it (another choice moves whole values)."""
    x = jax.random.normal(jax.random.PRNGKey(0), shape)
    x = (jnp.round(x * 2) if ties else x).astype(dtype)  # rounded: many equal maxima in a window
    g = jax.random.normal(jax.random.PRNGKey(1), jax_pool(x).shape).astype(dtype)
    (y, back), (ours, our_back) = jax.vjp(jax_pool, x), jax.vjp(max_pool_3x3_s2, x)
    assert ours.shape == y.shape and np.array_equal(ours, y)
    # Where windows overlap, the same contributions are added in another order: equal within rounding.
    tolerance = 0.04 if dtype == jnp.bfloat16 else 1e-6
    np.testing.assert_allclose(np.float32(our_back(g)[0]), np.float32(back(g)[0]), atol=tolerance)


@pytest.mark.parametrize("grad", ["scatter", "masks"])
def test_both_forms_give_jaxs_gradient_inside_jit(grad):
    """The models' own call (stem_pool) differentiated inside jit, as a train step does: a reduce_window whose
    identity was a traced array was a generic reduction JAX cannot differentiate ("Linearization failed"),
    which broke every ResNet step with --pool-grad scatter, the GPU default, while CPUs took masks."""
    x = jnp.round(jax.random.normal(jax.random.PRNGKey(2), (2, 9, 8, 3)) * 2)  # ties too
    theirs = jax.jit(jax.grad(lambda x: jax_pool(x).sum()))(x)
    ours = jax.jit(jax.grad(lambda x: stem_pool(x, grad).sum()))(x)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_its_gradient_has_no_scatter():
    """What --deterministic pays for on the GPU (XLA's scatter determinism expander) is not in the program."""
    x = jnp.ones((2, 16, 16, 3))
    loss = lambda pool: jax.jit(jax.grad(lambda x: pool(x).sum())).lower(x).as_text()
    assert "scatter" in loss(jax_pool)
    assert "scatter" not in loss(max_pool_3x3_s2)


def test_auto_resolves_by_platform_and_determinism_and_reaches_the_resnets():
    assert pool_grad("auto", "cpu", False) == "masks" and pool_grad("auto", "gpu", False) == "scatter"
    assert pool_grad("auto", "gpu", True) == "masks" and pool_grad("scatter", "gpu", True) == "scatter"
    spec = replaced(TaskSpec(run_dir="x"), model="resnet50")
    decided = planned(spec)
    assert decided.record()["pool_grad"] == "masks"  # recorded in rank_map.json
    assert decided.step.model_options(spec.model)["pool_grad"] == "masks"
    for name in ("resnet50", "resnet18"):
        assert create_model(name, 10, pool_grad="masks").pool_grad == "masks"
        assert create_model(name, 10).pool_grad == "scatter"


def test_the_benchmark_times_both_forms(tmp_path):
    """benchmarks/pool_grad.py at a CPU size: both gradients timed and their ratio, as one JSON line."""
    script = Path(__file__).parents[1] / "benchmarks" / "pool_grad.py"
    argv = [sys.executable, str(script), "--batch", "2", "--side", "15", "--channels", "3", "--calls", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout.splitlines()[-1])
    assert row["scatter_ms"] > 0 and row["masks_ms"] > 0 and row["masks_x_scatter"] > 0, row
