#!/usr/bin/env python3
"""ResNet-50 bf16's step alone on one GPU, lever by lever, in one run and one process.

Each lever is one change from the baseline, the trainer's own settings for `--model resnet50
--precision bf16 --batch-size 256` on one GPU with DALI decoding there (what the issue's runs
resolve to): 5 steps of 256 per device call (--steps-per-call auto), --parallel sharded, XLA's
command buffers off (--cuda-graphs auto with nvJPEG), donated state, float32 BatchNorm statistics,
XLA's own options. The device call is the trainer's (trainer/step/parallel.py, its state from
set_up.create_train_state), on random images already on the GPU: no input at all. Each lever is
compiled with its XLA options (jax's compiler_options: the same table --xla-options fills
XLA_FLAGS from), run twice untimed, then timed for --seconds; the baseline runs first and again
last (the drift of the run). The table gives images/s, the ratio to the first baseline, the compile
time, and what the lever decides if it wins (docs/performance.md, "The step's levers").

On the GPU machine (about 4 minutes on one H200: most of it compiling; --out is rewritten after each
lever, so a run cut short keeps the levers it measured):

    python benchmarks/step_levers.py --out benchmarks/results/step_levers/h200.json

`--smoke-cpu` runs every lever on CPU devices with docs/models.md's BatchNorm MLP (bn_models, tests/ on
PYTHONPATH) in fp32 on 8x8 images, batches of 4, 6 and 8 (XLA:CPU compiles bf16 convolutions for
minutes): it checks the script, its numbers mean nothing. `--levers a,b` runs some (the baseline always).
`--trace DIR` profiles two more calls of each lever into DIR/LEVER; `kernel_time.py DIR/baseline
DIR/deterministic` then says which kinds of kernel take the time the lever adds.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from report import OFF_GRAPHS, environment, listed

# trainer/determinism.py's GPU_XLA_FLAGS (a test holds them equal)
DETERMINISTIC = {"xla_gpu_deterministic_ops": "true"}


@dataclass(frozen=True)
class Lever:
    name: str
    decides: str  # what a win would change
    batch: int = 256
    steps: int = 5  # per call: --steps-per-call auto for 256 (1,200 samples a call, plan/step.py)
    options: dict = field(default_factory=lambda: dict(OFF_GRAPHS))  # as --xla-options writes them
    batchnorm_stats: str = "float32"
    pool_grad: str = "scatter"  # --pool-grad (model/pooling.py)
    donate: bool = True


def levers() -> list[Lever]:
    opts = lambda **more: {**OFF_GRAPHS, **more}
    return [
        Lever("baseline", "-"),
        Lever("batch-384", "the recipe's --batch-size (with the LR rule); not a default: it changes the steps", 384, 3),
        Lever("batch-512", "the same, at 512 per GPU", 512, 2),
        Lever("steps-per-call-1", "plan/step.py's CALL_SAMPLES (fewer steps a call)", steps=1),
        Lever("steps-per-call-10", "plan/step.py's CALL_SAMPLES (more steps a call)", steps=10),
        Lever("command-buffers", "--cuda-graphs auto with nvJPEG (placement.cuda_graphs)", options={}),
        Lever(
            "autotune-0", "xla_options.GPU_DEFAULTS: xla_gpu_autotune_level", options=opts(xla_gpu_autotune_level="0")
        ),
        Lever(
            "latency-hiding",
            "xla_options.GPU_DEFAULTS: xla_gpu_enable_latency_hiding_scheduler",
            options=opts(xla_gpu_enable_latency_hiding_scheduler="true"),
        ),
        Lever(
            "conv-nhwc",
            "xla_options.GPU_DEFAULTS: xla_gpu_force_conv_nhwc",
            options=opts(xla_gpu_force_conv_nhwc="true"),
        ),
        Lever("batchnorm-compute", "plan/step.py's BATCHNORM_STATS['gpu'] = 'compute'", batchnorm_stats="compute"),
        Lever("no-donation", "nothing: donation stays (it saves a copy of the state)", donate=False),
        # --deterministic's price, and what might lower it (kernel_time.py on --trace's profiles says which kernels)
        Lever("deterministic", "determinism.GPU_XLA_FLAGS: what --deterministic costs", options=opts(**DETERMINISTIC)),
        Lever(
            "exclude-nondeterministic",
            "determinism.GPU_XLA_FLAGS: the kernels excluded, autotuning kept",
            options=opts(xla_gpu_exclude_nondeterministic_ops="true"),
        ),
        Lever(
            "deterministic-nhwc",
            "determinism.GPU_XLA_FLAGS with NHWC convolutions (their deterministic kernels may be faster)",
            options=opts(**DETERMINISTIC, xla_gpu_force_conv_nhwc="true"),
        ),
        Lever(
            "deterministic-bn-compute",
            "plan/step.py's BATCHNORM_STATS under --deterministic",
            options=opts(**DETERMINISTIC),
            batchnorm_stats="compute",
        ),
        # The stem pool's gradient without a scatter (model/pooling.py): --pool-grad auto under each
        Lever(
            "pool-masks",
            "plan/step.py's POOL_GRAD['gpu'] (--pool-grad auto without --deterministic)",
            pool_grad="masks",
        ),
        Lever(
            "deterministic-pool-masks",
            "--pool-grad auto under --deterministic (masks)",
            options=opts(**DETERMINISTIC),
            pool_grad="masks",
        ),
        Lever("baseline-again", "- (the run's drift)"),
    ]


def smoke(lever: Lever) -> Lever:
    """The same lever at CPU sizes: batches of 4, 6, 8 for 256, 384, 512, steps per call at most 2."""
    return replace(lever, batch={256: 4, 384: 6, 512: 8}[lever.batch], steps=min(lever.steps, 2))


_FRESH: dict = {}  # host train states, made once per model and BatchNorm setting (an init compiles)


def build(lever: Lever, model: str, image_size: int, precision: str, device):
    """The trainer's device call for `lever` on `device`, its placed state and tally, and a call's batch."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dali_launch.trainer.config import TaskSpec, replaced
    from dali_launch.trainer.data.rows import AXIS
    from dali_launch.trainer.resilience.checkpoint import zero_tally
    from dali_launch.trainer.step import parallel
    from dali_launch.trainer.step.initial_state import create_train_state
    from dali_launch.trainer.step.sgd import call_tally

    rows = lever.batch * lever.steps
    key = (model, image_size, precision, lever.batchnorm_stats, lever.pool_grad)  # the batch does not change the state
    if key not in _FRESH:
        chosen = {"batchnorm_stats": lever.batchnorm_stats, "pool_grad": lever.pool_grad}
        spec = replaced(TaskSpec(run_dir="unused"), model=model, precision=precision, **chosen)
        _FRESH[key] = create_train_state(spec, np.zeros((1, image_size, image_size, 3), np.float16), 1000)
    fresh = _FRESH[key]
    mesh = jax.sharding.Mesh(np.array([device]), (AXIS,))
    data = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    mode = parallel.create("sharded", [device], [device], lever.batch, data, parallel.How(donate=lever.donate))
    images = jax.jit(
        lambda key: jax.random.normal(key, (1, rows, image_size, image_size, 3), jnp.float16), out_shardings=data
    )(jax.random.PRNGKey(1))
    labels = jax.device_put(np.arange(rows, dtype=np.int32)[None] % 10, data)
    valid = jax.device_put(np.ones((1, rows), np.float32), data)
    tally = jax.tree.map(
        lambda x: jax.device_put(np.asarray(x)[None], data),
        call_tally(zero_tally(fresh.recipe.task.metrics), fresh.recipe.task),
    )
    return mode, mode.place(fresh), tally, {"images": images, "labels": labels, "valid": valid}


def measure(lever: Lever, model: str, image_size: int, precision: str, seconds: float, trace: Path | None) -> dict:
    """Compile `lever`'s call, run it twice, then time it for about `seconds` (then trace it into `trace`)."""
    import jax

    from dali_launch.trainer.plan.xla_options import typed

    mode, state, tally, batch = build(lever, model, image_size, precision, jax.local_devices()[0])
    began = time.perf_counter()
    call = mode.call.lower(state, tally, batch).compile(compiler_options=typed(lever.options))
    compile_s = time.perf_counter() - began
    for _ in range(2):
        began = time.perf_counter()
        state, tally = call(state, tally, batch)
        jax.block_until_ready(tally)
    calls = max(3, math.ceil(seconds / (time.perf_counter() - began)))
    began = time.perf_counter()
    for _ in range(calls):
        state, tally = call(state, tally, batch)
    jax.block_until_ready(tally)
    elapsed = time.perf_counter() - began
    images = calls * lever.batch * lever.steps
    if trace:  # two more calls under the profiler: benchmarks/kernel_time.py says where their GPU time went
        with jax.profiler.trace(str(trace / lever.name), create_perfetto_trace=True):
            for _ in range(2):
                state, tally = call(state, tally, batch)
            jax.block_until_ready(tally)
    del call, state, tally, batch
    gc.collect()
    return {
        **lever.__dict__,
        "images_per_s": images / elapsed,
        "ms_per_step": 1000 * elapsed / (calls * lever.steps),
        "compile_s": compile_s,
        "calls": calls,
    }


def table(rows: list[dict]) -> str:
    base = next((r["images_per_s"] for r in rows if r["name"] == "baseline" and "error" not in r), None)
    head = f"{'lever':<26}{'images/s':>10}{'x baseline':>12}{'ms/step':>9}{'compile s':>11}  if it wins"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['name']:<26}{'failed':>10}  {r['error']}")
            continue
        ratio = f"{r['images_per_s'] / base:.3f}" if base else "-"
        lines.append(
            f"{r['name']:<26}{r['images_per_s']:>10,.0f}{ratio:>12}{r['ms_per_step']:>9.2f}{r['compile_s']:>11.1f}"
            f"  {r['decides']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help="A --model with a float32_stats field (resnet50).")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--seconds", type=float, default=3.0, help="Timed seconds per lever, after its warm-up.")
    names = tuple(lever.name for lever in levers())
    parser.add_argument("--levers", type=listed(choices=names), help="Only these levers (and the baseline).")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--trace", type=Path, help="Profile 2 calls of each lever into TRACE/LEVER (kernel_time.py).")
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU devices, a tiny model: checks the script only.")
    args = parser.parse_args(argv)
    if args.smoke_cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
        args.model, args.image_size, args.precision = "bn_models:BatchNormDropoutMLP", 8, "fp32"
    chosen = [
        lever for lever in levers() if not args.levers or lever.name in args.levers or lever.name.startswith("baseline")
    ]
    rows = []
    for lever in chosen:
        lever = smoke(lever) if args.smoke_cpu else lever
        try:
            rows.append(measure(lever, args.model, args.image_size, args.precision, args.seconds, args.trace))
        except Exception as e:  # another lever may still run: XLA may refuse an option this version lacks
            rows.append({**lever.__dict__, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
        print(table(rows).splitlines()[-1], flush=True)
        write(args, rows)  # after each lever: a run cut short by a time limit keeps what it measured
    print("\n" + table(rows))
    if args.out:
        print(f"wrote {args.out}")
    return 1 if any("error" in r for r in rows) else 0


def write(args, rows: list[dict]) -> None:
    if not args.out:
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"argv": sys.argv, "environment": environment(), "model": args.model, "precision": args.precision}
    doc |= {"image_size": args.image_size, "table": table(rows), "rows": rows}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
