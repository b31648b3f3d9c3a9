#!/usr/bin/env python3
"""The stem max pool's gradient alone, both forms of --pool-grad (trainer/model/pooling.py), on this machine's
first device: JAX's select_and_scatter against the nine offset masks, ResNet-50's stem shape by default
(a batch of 112x112x64 activations), with and without XLA's deterministic scatter on GPUs (an XLA flag is
read when JAX starts: run once with --deterministic, once without).

    python benchmarks/pool_grad.py --batch 256 --dtype bfloat16           # one H200: ResNet-50's stem
    python benchmarks/pool_grad.py --batch 32 --dtype float32             # a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--side", type=int, default=112, help="The pool's input side (ResNet-50: 112).")
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--deterministic", action="store_true", help="XLA's --xla_gpu_deterministic_ops=true.")
    args = parser.parse_args(argv)
    if args.deterministic:  # before JAX starts
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true"
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from dali_launch.trainer.model.pooling import max_pool_3x3_s2

    forms = {"scatter": lambda x: nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME"), "masks": max_pool_3x3_s2}
    x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, args.side, args.side, args.channels), args.dtype)
    row = {"device": jax.devices()[0].device_kind, "deterministic": args.deterministic, **vars(args)}
    for name, pool in forms.items():
        grad = jax.jit(jax.grad(lambda x, pool=pool: pool(x).astype(jnp.float32).sum()))
        grad(x).block_until_ready()  # compiled
        start = time.perf_counter()
        for _ in range(args.calls):
            grad(x).block_until_ready()
        row[f"{name}_ms"] = round((time.perf_counter() - start) / args.calls * 1e3, 3)
    row["masks_x_scatter"] = round(row["masks_ms"] / row["scatter_ms"], 3)
    print(json.dumps(row))
    return row


if __name__ == "__main__":
    sys.exit(main() and 0)
