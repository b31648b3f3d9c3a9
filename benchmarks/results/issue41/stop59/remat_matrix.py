"""Why --remat blocks barely moved the trainer's ViT step on a GPU (issue 41): the trainer's own step
(benchmarks/mesh_calls.py: its train state, Sharded runner, AdamW, bf16, 5 steps a call, 1000 classes, 224x224)
compiled, never run: --remat none, --remat blocks with the blocks' scan as vit.unroll has it (a loop under remat),
and --remat blocks with the blocks unrolled on GPUs as before (the cause: unrolled, XLA keeps every block's
activations again). --as-gpu: on CPU, the model traced as for a GPU (its blocks unrolled but under remat),
compiled by XLA:CPU. Prints XLA's temporaries (compiled.memory_analysis()) per row; JSON lines to --out.

    PYTHONPATH=/above/dali_launch python benchmarks/results/issue41/stop59/remat_matrix.py --model vit-b16 --batch 256
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/: mesh_calls, report


def temporaries(setup, unrolled: bool = False) -> tuple[float, float]:
    """XLA's temporaries (GiB) for the trainer's step at `setup`, and the compile's seconds (mesh_calls.compiled);
    `unrolled`: the blocks' scan unrolled even under --remat blocks, as vit.unroll had it on GPUs before."""
    import jax
    from mesh_calls import compiled, fresh_state, runner

    from dali_launch.trainer.model import vit

    fresh, example = fresh_state(setup)
    shapes = jax.eval_shape(fresh, example)[1]
    mode, tally, batch = runner(setup, jax.local_devices()[0], shapes, layout=False)
    rule = vit.unroll
    if unrolled:
        vit.unroll = lambda depth, remat, backend: 1 if backend == "cpu" else depth
    try:
        call, seconds = compiled(mode, shapes, tally, batch)
    finally:
        vit.unroll = rule
    return call.memory_analysis().temp_size_in_bytes / 2**30, seconds


def main() -> int:
    import jax
    import mesh_step
    from mesh_calls import Setup

    from dali_launch.trainer.model import vit

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="vit-b16")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--remat-only", action="store_true", help="Only the --remat blocks rows (looped, unrolled).")
    parser.add_argument("--as-gpu", action="store_true", help="Trace the model as for a GPU (its blocks' scan rule).")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.as_gpu:  # vit reads jax.default_backend() when the model is traced; XLA:CPU still compiles it
        jax.default_backend = lambda: "gpu"
    if args.model in mesh_step.RUNGS:  # a ladder rung: its patch set in this process, as mesh_step.rung does
        vit.PATCH = mesh_step.RUNGS[args.model].patch
    base = Setup(model=args.model, batch=args.batch, image_size=args.image_size, precision="bf16", steps=5)
    blocks = replace(base, remat="blocks")
    rows = [(blocks, False), (blocks, True)]  # looped (vit.unroll), then unrolled as before
    rows = rows if args.remat_only else [(base, False), *rows]
    for setup, unrolled in rows:
        temp, seconds = temporaries(setup, unrolled)
        row = {"model": setup.model, "batch": setup.batch, "remat": setup.remat, "steps": setup.steps}
        row |= {"precision": setup.precision, "blocks": "unrolled" if unrolled else "vit.unroll"}
        row |= {"temp_gib": round(temp, 3), "compile_s": round(seconds, 1), "backend": jax.devices()[0].platform}
        row["traced_as"] = "gpu" if args.as_gpu else row["backend"]
        print(json.dumps(row), flush=True)
        if args.out:
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
