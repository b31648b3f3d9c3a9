#!/usr/bin/env python3
"""Two GPUs: the example's own multi-GPU pmap section against dali-launch, same data.

  example   the notebook's multi-GPU section as written: one `mixed` pipeline per GPU (shard i of
            2), DALI's JAX iterator over both, a pmapped step with NO gradient averaging (each GPU
            trains its own replica: the bug we fix), a global batch of 200.
  ours      `dali-launch --local --gpus-per-node 2 --processes 2` (2 processes x 1 GPU) and
            `dali-launch train --gpus-per-node 2` (1 process x 2 GPUs), gradients averaged, at
            the same global batch of 200 (100 per GPU), for each --parallel and --steps-per-call.

    python benchmarks/multi_gpu.py --data DIR [--epochs 3] [--steps-per-call 24] [--parallel pmap,sharded]

`--smoke-cpu`: two CPU devices stand in for the GPUs (the example's pipelines decode on the CPU): it
checks the script, its numbers mean nothing.

Times are means over epochs 1..N-1 (epoch 0 compiles); ours come from each run's metrics.jsonl,
which also holds the launch -> first step time of local mode. Each of our runs starts with an
empty XLA compilation cache (cold); the first one is then run again on its warm cache, the
start-up a requeued or repeated job sees.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from example import run_example_two_gpus  # the same folder: run as a script
from report import read_epochs

from dali_launch.trainer.topology import disable_cuda_graphs


def run_ours(name: str, args: list[str], data_dir: Path, epochs: int, root: Path, cache: Path, platform: str) -> dict:
    run_root = root / name.replace(" ", "_").replace(",", "")
    cmd = [
        sys.executable,
        "-m",
        "dali_launch.launcher.cli",
        *args,
        "--platform",
        platform,
        "--epochs",
        str(epochs),
        "--data-dir",
        str(data_dir),
        "--run-root",
        str(run_root),
        "--compile-cache",
        str(cache),
    ]
    print(f"ours: {' '.join(cmd[2:])}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return {"name": name, "failed": True}
    metrics = next(run_root.glob("*/metrics.jsonl"))
    first = json.loads(metrics.read_text().splitlines()[0])
    return {
        "name": name,
        "epochs": read_epochs(metrics),
        "first_step_s": first.get("first_step_s"),
        "startup": first.get("startup"),
        "command": cmd[2:],
    }


def table(results: list[dict]) -> str:
    base = results[0]
    mean = lambda r, k: sum(e[k] for e in r["epochs"][1:]) / max(1, len(r["epochs"]) - 1)
    width = max(len(r["name"]) for r in results) + 2
    rows = [f"{'':<{width}}{'train s':>8}{'x ex':>7}{'img/s':>9}{'wait':>6}{'eval s':>8}{'acc':>8}{'1st step s':>11}"]
    for r in results:
        if r.get("failed"):
            rows.append(f"{r['name']:<{width}}FAILED")
            continue
        t, wait = mean(r, "train_s"), r["epochs"][-1].get("data_wait_fraction")
        first = r.get("first_step_s")
        rows.append(
            f"{r['name']:<{width}}{t:>8.2f}{t / mean(base, 'train_s'):>6.2f}x{60_000 / t:>9,.0f}"
            f"{(f'{wait:.0%}' if wait is not None else '-'):>6}{mean(r, 'eval_s'):>8.2f}"
            f"{r['epochs'][-1]['test_accuracy']:>8.4f}{(f'{first:.1f}' if first else '-'):>11}"
        )
    return "\n".join(rows)


def ours_runs(args) -> list[tuple[str, list[str]]]:
    runs = []
    for k in args.steps_per_call.split(","):
        for mode in args.parallel.split(","):
            flags = [
                "--global-batch-size",
                "200",
                "--steps-per-call",
                k,
                "--parallel",
                mode,
                "--reader-threads",
                str(args.reader_threads),
                "--readers-per-device",
                str(args.readers),
                "--cuda-graphs",
                args.cuda_graphs,
            ]
            runs.append(
                (f"ours 2 proc x 1 GPU {mode} k={k}", ["--local", "--gpus-per-node", "2", "--processes", "2", *flags])
            )
            runs.append((f"ours 1 proc x 2 GPU {mode} k={k}", ["train", "--gpus-per-node", "2", *flags]))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="Folder with training/ and testing/ Caffe2 LMDBs.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-call", default="0", help="Our --steps-per-call values, e.g. 1,24 (0: auto).")
    parser.add_argument(
        "--parallel",
        default="sharded",
        help="Our --parallel values, e.g. pmap,sharded (default: what auto takes for the MLP).",
    )
    parser.add_argument("--readers", type=int, default=0, help="Our --readers-per-device (0: auto).")
    parser.add_argument("--reader-threads", type=int, default=2, help="Our --reader-threads (default 2, ours').")
    parser.add_argument(
        "--cuda-graphs",
        choices=("auto", "on", "off"),
        default="auto",
        help="Our --cuda-graphs (default auto); off also turns them off for the example.",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--work-dir", type=Path, help="Where the runs go (default: a new temporary folder).")
    parser.add_argument(
        "--smoke-cpu", action="store_true", help="Two CPU devices stand in for GPUs: checks the script."
    )
    parser.add_argument("--example-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    data = args.data.absolute()
    root = args.work_dir.absolute() if args.work_dir else Path(tempfile.mkdtemp(prefix="multi-gpu-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.smoke_cpu:  # before JAX starts
        os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    elif args.cuda_graphs == "off":
        disable_cuda_graphs()
    if args.example_only:
        result = run_example_two_gpus(data, args.epochs, gpu=not args.smoke_cpu)
        args.example_only.write_text(json.dumps(result))
        return 0
    # The example runs in a child process: JAX keeps most of both GPUs' memory until its process ends.
    subprocess.run(
        [
            sys.executable,
            __file__,
            "--data",
            str(data),
            "--epochs",
            str(args.epochs),
            "--example-only",
            str(root / "example.json"),
            "--cuda-graphs",
            args.cuda_graphs,
            *(["--smoke-cpu"] if args.smoke_cpu else []),
        ],
        check=True,
        timeout=900,
    )
    results = [json.loads((root / "example.json").read_text())]
    runs, platform = ours_runs(args), "cpu" if args.smoke_cpu else "gpu"
    for i, (name, flags) in enumerate(runs):
        results.append(run_ours(name + " (cold)", flags, data, args.epochs, root, root / f"xla-{i}", platform))
    name, flags = runs[0]
    results.append(run_ours(name + " (warm)", flags, data, args.epochs, root, root / "xla-0", platform))
    text = table(results)
    print(
        "\n" + text + "\ntrain s / eval s: mean of epochs 1..N-1; x ex: train time / the example's; img/s: "
        "60,000 / train s; wait: share of the last epoch waiting for data; 1st step: launch -> first step done "
        "(local mode); cold: empty XLA compilation cache, warm: the cache of the run above"
    )
    for r in results:
        if r.get("startup"):
            print(f"{r['name']}: start-up " + ", ".join(f"{k} {v:.1f}" for k, v in r["startup"].items()))
    if args.out:
        args.out.write_text(json.dumps({"table": text, "argv": sys.argv, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
