"""Why --remat blocks barely moves the trainer's ViT step on a GPU (issue 41): the trainer's own step
(benchmarks/mesh_calls.py: its train state, Sharded runner, AdamW, 1000 classes, 224x224) compiled, never run,
for a matrix of what differs between it and the gradient-only probe that did shrink (stop57/remat_cse_probe.py):
--remat none|blocks, steps per call 1|5, precision bf16|fp32, and XLA options that could hoist or merge the
recomputation. Prints XLA's temporaries (compiled.memory_analysis()) per row; JSON lines to --out.

    PYTHONPATH=/path/above/dali_launch python benchmarks/results/issue41/stop59/remat_matrix.py --model vit-b16 --batch 256
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/: mesh_calls, report

VARIANTS = {  # name: XLA options added to the benchmark's own (command buffers off)
    "defaults": {},
    "no-lhs": {"xla_gpu_enable_latency_hiding_scheduler": "false"},
    "no-unroll": {"xla_gpu_enable_while_loop_unrolling": "WHILE_LOOP_UNROLLING_NO_UNROLL"},
    "no-triton-gemm": {"xla_gpu_enable_triton_gemm": "false"},
    "slop-50": {"xla_gpu_memory_limit_slop_factor": "50"},  # the schedulers' memory limit halved
}


def temporaries(setup, options: dict) -> tuple[float, float]:
    import jax
    from mesh_calls import fresh_state, runner
    from report import OFF_GRAPHS

    from dali_launch.trainer.step.xla_options import typed

    device = jax.local_devices()[0]
    fresh, example = fresh_state(setup)
    shapes = jax.eval_shape(fresh, example)[1]
    mode, tally, batch = runner(setup, device, shapes, layout=False)
    leaves, structure = jax.tree.flatten(shapes)
    abstract = structure.unflatten([jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=mode.replicated) for x in leaves])
    began = time.perf_counter()
    call = mode.call.lower(abstract, tally, *batch).compile(compiler_options=typed({**OFF_GRAPHS, **options}))
    return call.memory_analysis().temp_size_in_bytes / 2**30, time.perf_counter() - began


def main() -> int:
    import jax
    from mesh_calls import Setup

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="vit-b16")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--variants", default="defaults,no-lhs,no-unroll,no-triton-gemm,slop-50")
    parser.add_argument(
        "--remat-only", action="store_true", help="Only --remat blocks: 5 and 1 steps, then 5 under each variant."
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import mesh_step

    from dali_launch.trainer.model import vit

    if args.model in mesh_step.RUNGS:  # a ladder rung: its patch set in this process, as mesh_step.rung does
        vit.PATCH = mesh_step.RUNGS[args.model].patch
    gpu = jax.default_backend() == "gpu"
    base = Setup(model=args.model, batch=args.batch, image_size=args.image_size, precision="bf16", steps=5)
    rows = [(base, "defaults"), (replace(base, remat="blocks"), "defaults")]
    rows += [
        (replace(base, remat="blocks", steps=1), "defaults"),
        (replace(base, remat="blocks", precision="fp32"), "defaults"),
    ]
    rows += [(replace(base, steps=1, precision="fp32"), "defaults")]
    rows += [(replace(base, remat="blocks", steps=1, precision="fp32"), "defaults")]
    variants = [(replace(base, remat="blocks"), v) for v in args.variants.split(",")[1:]]
    if args.remat_only:
        rows = [(replace(base, remat="blocks"), "defaults"), (replace(base, remat="blocks", steps=1), "defaults")]
        rows += variants
    elif gpu:
        rows += variants
    for setup, variant in rows:
        temp, seconds = temporaries(setup, VARIANTS[variant])
        row = {"model": setup.model, "batch": setup.batch, "remat": setup.remat, "steps": setup.steps}
        row |= {
            "precision": setup.precision,
            "variant": variant,
            "temp_gib": round(temp, 3),
            "compile_s": round(seconds, 1),
        }
        row["backend"] = jax.default_backend()
        print(json.dumps(row), flush=True)
        if args.out:
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
