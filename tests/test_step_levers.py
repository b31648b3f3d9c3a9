"""The step's levers as settings the task plans: --xla-options (before JAX starts, into XLA_FLAGS) and
--batchnorm-stats (the model's statistics' precision); benchmarks/step_levers.py measures them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from plans import planned

from dali_launch.trainer.config import TaskSpec, replaced
from dali_launch.trainer.model.registry import create_model
from dali_launch.trainer.model.resnet import batch_norm
from dali_launch.trainer.plan import xla_options
from dali_launch.trainer.plan.placement import place
from dali_launch.trainer.plan.step import batchnorm_stats


def test_xla_options_by_platform_and_parse():
    assert xla_options.chosen("auto", "gpu") == xla_options.GPU_DEFAULTS
    assert xla_options.chosen("auto", "cpu") == {} and xla_options.chosen("none", "gpu") == {}
    given = "--xla_gpu_autotune_level=2 xla_gpu_enable_latency_hiding_scheduler=true"
    assert xla_options.chosen(given, "gpu") == {
        "xla_gpu_autotune_level": "2",
        "xla_gpu_enable_latency_hiding_scheduler": "true",
    }
    for bad in ("autotune=2", "xla_gpu_autotune_level", "xla_gpu_autotune_level="):
        with pytest.raises(ValueError):
            xla_options.parse(bad)


def test_every_gpu_default_is_an_option_xla_knows():
    """The table a measured winner is added to: XLA (its CPU compiler reads the same DebugOptions) takes it."""
    typed = xla_options.typed({**xla_options.GPU_DEFAULTS, "xla_gpu_enable_latency_hiding_scheduler": "true"})
    assert typed["xla_gpu_enable_latency_hiding_scheduler"] is True
    jax.jit(lambda x: x + 1).lower(1.0).compile(compiler_options=typed)


def test_placement_carries_them_and_the_plan_records_them():
    spec = replaced(TaskSpec(run_dir="x"), xla_options="xla_gpu_autotune_level=0")
    where = place(spec, "cpu")
    assert where.xla_options == {"xla_gpu_autotune_level": "0"}
    assert planned(spec).record()["xla_options"] == {"xla_gpu_autotune_level": "0"}


def test_batchnorm_stats_reach_the_model():
    assert batchnorm_stats("auto", "gpu") == "float32" and batchnorm_stats("compute", "gpu") == "compute"
    assert create_model("resnet50", 10, batchnorm_stats="compute").float32_stats is False
    assert create_model("resnet50", 10).float32_stats is True
    assert not hasattr(create_model("mlp", 10), "float32_stats")  # other models: untouched


def test_compute_precision_statistics_are_another_program_with_the_same_shapes():
    """resnet.py's BatchNorm on bf16 activations: statistics reduced in bf16 move the running means a little,
    never their shapes or dtypes (the float32 batch_stats the checkpoint keeps)."""
    x = jnp.asarray(np.random.default_rng(0).normal(1.0, 3.0, size=(256, 8)), jnp.bfloat16)
    stats = {}
    for exact in (True, False):
        norm = batch_norm(train=True, float32_stats=exact)()
        variables = norm.init(jax.random.PRNGKey(0), x)
        _, stats[exact] = norm.apply(variables, x, mutable=["batch_stats"])
    a, b = (jax.tree.leaves(stats[k]) for k in (True, False))
    assert [(u.shape, u.dtype) for u in a] == [(u.shape, u.dtype) for u in b] == [((8,), jnp.float32)] * 2
    assert any(not np.array_equal(u, v) for u, v in zip(a, b))
    assert all(np.allclose(u, v, rtol=0.02, atol=0.02) for u, v in zip(a, b))
