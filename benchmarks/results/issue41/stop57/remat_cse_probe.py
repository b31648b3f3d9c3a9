"""vit-b16's gradient (batch 64, 224x224, f32) compiled with --remat blocks, its nn.remat's prevent_cse False then
True: XLA's temporaries (compiled.memory_analysis()). On one H200 (2026-12-06): 11.666 GiB with False, as without
remat (11.666), 1.82 GiB with True. Run: PYTHONPATH=. python benchmarks/results/issue41/stop57/remat_cse_probe.py
(dali_launch importable)."""

import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from dali_launch.trainer.entry_points import create_model

remat = nn.remat


def temporaries(cse: bool) -> int:
    nn.remat = lambda target, **kw: remat(target, **{**kw, "prevent_cse": cse})
    model = create_model("vit-b16", 1000, remat="blocks")
    x = jnp.zeros((64, 224, 224, 3), jnp.float32)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), x[:1]))
    compiled = jax.jit(jax.value_and_grad(lambda v, x: model.apply(v, x).mean())).lower(variables, x).compile()
    return compiled.memory_analysis().temp_size_in_bytes


for cse in (False, True):
    start = time.time()
    temp = temporaries(cse)
    print(f"prevent_cse {cse}: temporaries {temp / 2**30:.3f} GiB, compile {time.time() - start:.1f} s", flush=True)
