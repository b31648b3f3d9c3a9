#!/usr/bin/env python3
"""DALI's multi-GPU JAX tutorial function, unchanged (benchmarks/dali_tutorial_gpu.py: nvJPEG decoding, labels
moved to the GPU, its sharding built over jax.devices() as the module is imported), trained by `dali-launch` on
the GPU for one short run in each of two modes, and one JSON line: each run's test accuracy, and whether it
trained (exit 0, and test accuracy past TRAINED):

    train   `dali-launch train`: one process, which also ran the launcher's checks (they import the module, and
            so start JAX, before the run sets XLA up: XLA_FLAGS carries what DALI's tutorial sets itself)
    local   `dali-launch --local --processes 1`: the launcher checks with its JAX kept to the CPU, the task
            imports the module after its own set-up

On the GPU machine (gpu.sh's `tutorial` question, about a minute on Fashion-MNIST):

    python benchmarks/tutorial.py --data /tmp/fmnist --out benchmarks/results/tutorial/h200.json

`--smoke-cpu` trains tests/dali_tutorial.py, the twin whose two GPU placements are CPU ones, on a CPU device: the
script's paths, not its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
MODES = {"train": ["train"], "local": ["--local", "--processes", "1", "--gpus-per-node", "1"]}
TRAINED = 0.3  # three times chance on 10 classes
# DALI's tutorials set this before anything imports JAX: DALI's own thread synchronizes the device, which breaks
# the CUDA graphs XLA would capture. The run sets it for its tasks; `train`'s checks start JAX before that.
NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="


def run(mode: str, args, run_root: Path) -> dict:
    """One run of the tutorial's function in `mode`: its test accuracy from result.json, or its last lines."""
    module = "dali_tutorial" if args.smoke_cpu else "dali_tutorial_gpu"
    where = ["--platform", "cpu"] if args.smoke_cpu else ["--platform", "gpu", "--decoder", "mixed"]
    argv = [sys.executable, "-m", "dali_launch.launcher.cli", *MODES[mode], *where]
    argv += ["--pipeline", f"{module}:mnist_sharded_iterator", "--data-dir", str(args.data)]
    argv += ["--epochs", str(args.epochs), "--run-root", str(run_root / mode)]
    path = [str(REPO / "tests" if args.smoke_cpu else HERE), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), "JAX_TRACEBACK_FILTERING": "off"}
    if not args.smoke_cpu:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {NO_COMMAND_BUFFERS}".strip()
    began = time.perf_counter()
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=args.timeout_s, env=env, stdin=subprocess.DEVNULL
    )
    found = sorted((run_root / mode).glob("*/result.json"))
    accuracy = json.loads(found[-1].read_text())["final"]["test_accuracy"] if found and not proc.returncode else None
    row = {"mode": mode, "argv": argv[3:], "rc": proc.returncode, "wall_s": round(time.perf_counter() - began, 1)}
    row |= {"test_accuracy": accuracy, "trained": accuracy is not None and accuracy > TRAINED}
    if proc.returncode:
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-60:]  # the whole traceback, unfiltered
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="A Caffe2 LMDB data set: DIR/training and DIR/testing.")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--smoke-cpu", action="store_true", help="The CPU twin on a CPU device.")
    parser.add_argument("--timeout-s", type=int, default=300, help="Per run.")
    parser.add_argument("--out", default="", help="Write the JSON line here too.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tutorial-") as root:
        runs = [run(mode, args, Path(root)) for mode in MODES]
    doc = {
        "pipeline": "DALI's multi-GPU JAX tutorial, unchanged",
        "runs": runs,
        "trained": all(r["trained"] for r in runs),
    }
    line = json.dumps(doc)
    print(line)
    if args.out:
        Path(args.out).write_text(line + "\n")
    return 0 if doc["trained"] else 1


if __name__ == "__main__":
    sys.exit(main())
