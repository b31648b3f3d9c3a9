#!/usr/bin/env python3
"""The parts of an epoch, one at a time, on one device: where docs/performance.md's "flag by flag" figures come from.

    codecs    --readers pipelines of mnist on the CPU: build time and decode rate with all of
              nvImageCodec's codecs, then with its CPU codecs only (what dali-launch gives a CPU
              pipeline, trainer/data/codecs.py); the first batch must be the same pixels
    data      data-only epochs through the trainer's DeviceBatches (pipelines on the CPU, batches
              put on the device), per readers x threads x prefetch in --data-grid and per
              --sample-orders: shards (DALI's Caffe2 reader) vs global (records/caffe2.py through
              an external source: the price of elastic resume, docs/performance.md), the global one read in
              the process and in --feed-workers DALI worker processes
    steps     the example's 1,200 SGD steps (MLP, batch 50) fused 24 per call, XLA's CUDA graphs
              (command buffers) off and on, chosen per program through compiler_options

On the GPU machine:

    CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python benchmarks/components.py --data /tmp/fmnist \
        --out benchmarks/results/components/h200.json

`--smoke-cpu` runs it on CPU JAX (for checking the script; its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from report import environment, listed

STEPS, BATCH, PER_CALL = 1200, 50, 24  # the example's epoch: 60,000 / 50
CUDA_GRAPHS = {"off": {"xla_gpu_enable_command_buffer": ""}, "on": {}}  # on: XLA's default


def pipelines(data: Path, readers: int, threads: int, prefetch: int) -> list:
    from dali_launch.trainer.data.contract import PipelineArgs
    from dali_launch.trainer.data.dali import graph
    from dali_launch.trainer.data.pipelines import mnist

    def one(shard: int):
        args = PipelineArgs(
            path=str(data / "training"),
            shard_id=shard,
            num_shards=readers,
            batch_size=150,
            training=True,
            on_gpu=False,
            decoder="cpu",
            seed=shard,
            num_classes=10,
            image_size=28,
        )
        return graph(
            mnist,
            args,
            "mnist",
            batch_size=150,
            num_threads=threads,
            device_id=None,
            seed=shard,
            prefetch_queue_depth=prefetch,
        )

    return [one(shard) for shard in range(readers)]


def codecs(data: Path, readers: int) -> list[dict]:
    """All codecs first: nvImageCodec reads its codec folder each time a decoder is made."""
    import numpy as np

    from dali_launch.trainer.data import codecs as codec_links

    rows = []
    for name in ("all codecs", "CPU codecs only"):
        if name != "all codecs":
            codec_links.use_cpu_codecs_only()
        pipes = pipelines(data, readers, 2, 2)
        start = time.perf_counter()
        for pipe in pipes:
            pipe.build()
        built = time.perf_counter() - start
        first = float(np.array(pipes[0].run()[0].as_tensor()).sum())
        start, samples = time.perf_counter(), 0
        for _ in range(20):
            samples += sum(len(pipe.run()[0]) for pipe in pipes)
        rate = samples / (time.perf_counter() - start)
        rows.append(
            {
                "component": "codecs",
                "setting": f"{name}, {readers} pipelines",
                "build_s": built,
                "images_per_s": rate,
                "first_batch_sum": first,
            }
        )
        del pipes
    return rows


def data_epochs(data: Path, grid: list[str], orders: list[str], workers: list[int], epochs: int = 3) -> list[dict]:
    import jax

    from dali_launch.trainer.config import DataConfig
    from dali_launch.trainer.data import dali, shards
    from dali_launch.trainer.data.batches import Readers
    from dali_launch.trainer.data.decided import DataPlan

    device, rows = jax.devices()[:1], []
    variants = [(order, w) for order in orders for w in (workers if order == "global" else [0])]
    for cell, (order, feed_workers) in ((cell, v) for cell in grid for v in variants):  # side by side
        readers, threads, prefetch = (int(x) for x in cell.split("x"))
        config = DataPlan(
            DataConfig(data_dir=str(data), prefetch=prefetch), "cpu", threads, readers, output_dtype="float32"
        )  # the data plan's decisions given, as dali.build takes them
        sharding = shards.Sharding(0, 1, 1, readers)
        start = dali.Start(order, 0, 1, BATCH, PER_CALL, feed_workers=feed_workers)
        built = time.perf_counter()
        split, readers = dali.Split(str(data / "training"), True, BATCH * PER_CALL), Readers(device, device, sharding)
        batches = dali.build(split, readers, config, start=start)
        built, times = time.perf_counter() - built, []
        for _ in range(epochs):
            start = time.perf_counter()
            for batch in batches.epoch():  # noqa: B007 - the last batch is waited for below
                pass
            jax.block_until_ready(batch)
            times.append(time.perf_counter() - start)
        rows.append(
            {
                "component": "data",
                "setting": f"{order}{f' ({feed_workers} workers)' if feed_workers else ''}: {readers} readers x "
                f"{threads} threads, prefetch {prefetch}",
                "build_s": built,
                "epoch_s": min(times[1:] or times),
                "images_per_s": batches.num_samples / min(times[1:] or times),
                "epochs_s": times,
            }
        )
        del batches
    return rows


def steps(count: int) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dali_launch.trainer.config import TaskSpec
    from dali_launch.trainer.step import sgd
    from dali_launch.trainer.step.initial_state import create_train_state

    spec = TaskSpec(run_dir="unused")
    initial = jax.tree.map(np.asarray, create_train_state(spec, np.zeros((1, 784), np.float32), count))
    rng = np.random.default_rng(0)
    images = jax.device_put(rng.random((PER_CALL, BATCH, 784), np.float32))
    labels = jax.device_put(np.eye(10, dtype=np.float32)[rng.integers(0, 10, (PER_CALL, BATCH))])
    valid = jnp.ones((PER_CALL, BATCH), jnp.float32)

    def call(state, images, labels):
        state, sums = sgd.sgd_steps(state, {"images": images, "labels": labels, "valid": valid}, sgd.JIT_JOB)
        return state, sums["loss"]

    rows = []
    for name, options in CUDA_GRAPHS.items():
        fn = jax.jit(call, donate_argnums=0, compiler_options=options)
        state = jax.device_put(initial)
        state, loss = fn(state, images, labels)  # compiles
        jax.block_until_ready(loss)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(count // PER_CALL):
                state, loss = fn(state, images, labels)
            jax.block_until_ready(loss)
            times.append(time.perf_counter() - start)
        rows.append(
            {
                "component": "steps",
                "setting": f"CUDA graphs {name}, {count} steps, {PER_CALL} per call",
                "epoch_s": min(times),
                "epochs_s": times,
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'component':<10}{'setting':<58}{'seconds':>9}{'images/s':>12}", "-" * 89]
    for r in rows:
        seconds = r["build_s"] if r["component"] == "codecs" else r["epoch_s"]
        rate = f"{r['images_per_s']:,.0f}" if "images_per_s" in r else "-"
        lines.append(f"{r['component']:<10}{r['setting']:<58}{seconds:>9.3f}{rate:>12}")
    sums = {r["first_batch_sum"] for r in rows if r["component"] == "codecs"}
    if sums:
        lines.append(f"codecs: the first batch is the same with both: {'yes' if len(sums) == 1 else 'NO'}")
    lines += [
        "codecs: seconds to build the pipelines, images/s decoded by all of them; data: a data-only epoch "
        "(best of epochs 1..2); steps: one epoch of steps (best of 3)"
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="Folder with training/ and testing/ Caffe2 LMDBs.")
    parser.add_argument("--readers", type=int, default=8, help="Pipelines for the codecs part (default 8).")
    parser.add_argument(
        "--data-grid",
        type=listed(),
        default="4x4x2,4x4x4,8x2x4",
        help="Data-only epochs: READERSxTHREADSxPREFETCH cells (default 4x4x2,4x4x4,8x2x4).",
    )
    parser.add_argument(
        "--sample-orders",
        type=listed(choices=("shards", "global")),
        default="shards,global",
        help="Data-only epochs in these --sample-order values (default both).",
    )
    parser.add_argument(
        "--feed-workers",
        type=listed(int),
        default="0",
        help="Global order: DALI worker processes per pipeline (0: in the process), one data row each (default 0).",
    )
    parser.add_argument("--parts", type=listed(choices=("codecs", "data", "steps")), default="codecs,data,steps")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"SGD steps per timed epoch (default {STEPS}).")
    parser.add_argument("--out", type=Path, help="Write the table and every number as JSON here.")
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU JAX: checks the script only.")
    args = parser.parse_args(argv)
    if args.smoke_cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    data, rows = args.data.absolute(), []
    # codecs first: after use_cpu_codecs_only() this process has no other codecs
    rows += codecs(data, args.readers) if "codecs" in args.parts else []
    rows += data_epochs(data, args.data_grid, args.sample_orders, args.feed_workers) if "data" in args.parts else []
    rows += steps(args.steps) if "steps" in args.parts else []
    text = table(rows)
    print(text, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "argv": [sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
            "environment": environment(),
            "table": text,
            "rows": rows,
        }
        args.out.write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
