#!/usr/bin/env python3
"""A user's own GPU pipelines trained by `dali-launch` on the GPU, against the built-in pipeline with the same
recipe: DALI's multi-GPU JAX tutorial function, unchanged (benchmarks/dali_tutorial_gpu.py: `data_iterator`,
nvJPEG decoding, labels moved to the GPU, its sharding built over jax.devices() as the module is imported) and a
`@pipeline_def` function whose operators run on the GPU after nvJPEG (the same module), each trained in three
ways, then one JSON line: each run's test accuracy, its difference from `--pipeline mnist`'s (same flags, GPU
decoding too), whether every run trained (exit 0, test accuracy past TRAINED) and came within WITHIN of it:

    train   `dali-launch train`: one process, which also ran the launcher's checks (they import the module, and
            so start JAX, before the run sets XLA up: XLA_FLAGS carries what DALI's tutorial sets itself)
    local   `dali-launch --local --processes 1`: the launcher checks with its JAX kept to the CPU, the task
            imports the module after its own set-up
    api     the Python API, as a notebook would: the function imported (its JAX kept to the CPU first, so the GPU
            stays the run's) and handed to Executor("here").submit

On the GPU machine (gpu.sh's `tutorial` question, about two minutes on Fashion-MNIST):

    python benchmarks/tutorial.py --data /tmp/fmnist --out benchmarks/results/tutorial/h200.json

`--smoke-cpu` trains the twins in tests/dali_tutorial.py (their GPU placements made CPU ones) on a CPU device, with
tests/gpu_standin on PYTHONPATH: every pipeline output is a stand-in GPU one, so the runs take the GPU branches of
the data path; each row then says what the stand-in saw (`gpu_outputs`). The script's paths, not its figures.
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
STANDIN = REPO / "tests" / "gpu_standin"  # the stand-in for DALI's GPU outputs (--smoke-cpu)
FUNCTIONS = {"data_iterator": "mnist_sharded_iterator", "pipeline_def": "mnist_pipeline"}
MODES = ("train", "local", "api")
CLI = {"train": ["train"], "local": ["--local", "--processes", "1", "--gpus-per-node", "1"]}
TRAINED = 0.3  # three times chance on 10 classes
WITHIN = 0.01  # of the built-in pipeline's test accuracy
# DALI's tutorials set this before anything imports JAX: DALI's own thread synchronizes the device, which breaks
# the CUDA graphs XLA would capture. The run sets it for its tasks; `train`'s checks start JAX before that.
NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="

API = """
import importlib, json, sys
import jax
jax.config.update("jax_platforms", "cpu")  # this process's JAX, which the module starts: the GPU stays the run's
given = json.loads(sys.argv[1])
module, name = given["pipeline"].split(":")
function = getattr(importlib.import_module(module), name)  # the function itself, as a notebook imports it
from dali_launch.launcher.api import Executor
job = Executor("here", **given["settings"]).submit(pipeline=function)
print(json.dumps(job.result(timeout_s=given["timeout_s"])["final"]))
"""


def settings(args, run_root: Path) -> dict:
    """The recipe every run shares, by the API's names (the CLI's flags with dashes)."""
    where = {"platform": "cpu"} if args.smoke_cpu else {"platform": "gpu", "decoder": "mixed"}
    return {**where, "data_dir": str(args.data), "epochs": args.epochs, "run_root": str(run_root)}


def flags(given: dict) -> list[str]:
    return [f for key, value in given.items() for f in (f"--{key.replace('_', '-')}", str(value))]


def environment(args, counts: Path) -> dict:
    """The runs' environment: the functions' module importable; on CPUs the stand-in in every process."""
    path = [str(REPO / "tests" if args.smoke_cpu else HERE)]
    path += [str(STANDIN)] if args.smoke_cpu else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env["JAX_TRACEBACK_FILTERING"] = "off"
    if args.smoke_cpu:
        counts.mkdir(parents=True)
        env["GPU_STANDIN_COUNTS"] = str(counts)
    else:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {NO_COMMAND_BUFFERS}".strip()
    return env


def run(pipeline: str, mode: str, args, root: Path) -> dict:
    """One run of `pipeline` in `mode`: its test accuracy from result.json, or its last lines."""
    run_root = root / f"{pipeline.replace(':', '-')}-{mode}"
    given = settings(args, run_root)
    if mode == "api":
        payload = {"pipeline": pipeline, "settings": given, "timeout_s": args.timeout_s}
        argv = [sys.executable, "-c", API, json.dumps(payload)]
    else:
        argv = [sys.executable, "-m", "dali_launch.launcher.cli", *CLI[mode], "--pipeline", pipeline, *flags(given)]
    env = environment(args, run_root.with_name(run_root.name + "-counts"))
    began = time.perf_counter()
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=args.timeout_s, env=env, stdin=subprocess.DEVNULL, cwd=root
    )
    found = sorted(run_root.glob("*/result.json"))
    accuracy = json.loads(found[-1].read_text())["final"]["test_accuracy"] if found and not proc.returncode else None
    row = {"pipeline": pipeline, "mode": mode, "argv": argv[3:] if mode != "api" else payload}
    row |= {"rc": proc.returncode, "wall_s": round(time.perf_counter() - began, 1), "test_accuracy": accuracy}
    row["trained"] = accuracy is not None and accuracy > TRAINED
    if proc.returncode:
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-60:]  # the whole traceback, unfiltered
    if args.smoke_cpu:
        row["gpu_outputs"] = standin_counts(Path(env["GPU_STANDIN_COUNTS"]))
    return row


def standin_counts(folder: Path) -> dict:
    """What the stand-in saw in a run's processes, summed (tests/gpu_standin/gpu_outputs.py)."""
    total: dict = {}
    for path in folder.glob("process-*.json"):
        for key, value in json.loads(path.read_text()).items():
            total[key] = total.get(key, 0) + value
    return total


def summary(builtin: dict, runs: list[dict]) -> dict:
    """The JSON line: each run against the built-in pipeline's test accuracy."""
    base = builtin["test_accuracy"]
    for row in runs:
        close = row["test_accuracy"] is not None and base is not None
        row["vs_builtin"] = round(row["test_accuracy"] - base, 4) if close else None
    return {
        "pipelines": {
            "data_iterator": "DALI's multi-GPU JAX tutorial function, unchanged",
            "pipeline_def": "a @pipeline_def function, its operators on the GPU after nvJPEG",
        },
        "builtin": builtin,
        "runs": runs,
        "trained": builtin["trained"] and all(r["trained"] for r in runs),
        "within": all(r["vs_builtin"] is not None and abs(r["vs_builtin"]) <= WITHIN for r in runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="A Caffe2 LMDB data set: DIR/training and DIR/testing.")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--functions", default=",".join(FUNCTIONS), help="Of: " + ", ".join(FUNCTIONS))
    parser.add_argument("--modes", default=",".join(MODES), help="Of: " + ", ".join(MODES))
    parser.add_argument("--smoke-cpu", action="store_true", help="The CPU twins on a CPU device, outputs stood in.")
    parser.add_argument("--timeout-s", type=int, default=300, help="Per run.")
    parser.add_argument("--out", default="", help="Write the JSON line here too.")
    args = parser.parse_args()
    for given, known in ((args.functions, FUNCTIONS), (args.modes, MODES)):
        unknown = [name for name in given.split(",") if name not in known]
        if unknown:
            parser.error(f"no {unknown[0]}; choose among {', '.join(known)}")
    module = "dali_tutorial" if args.smoke_cpu else "dali_tutorial_gpu"
    with tempfile.TemporaryDirectory(prefix="tutorial-") as root:
        builtin = run("mnist", "train", args, Path(root))
        runs = [
            run(f"{module}:{FUNCTIONS[function]}", mode, args, Path(root))
            for function in args.functions.split(",")
            for mode in args.modes.split(",")
        ]
    doc = summary(builtin, runs)
    line = json.dumps(doc)
    print(line)
    if args.out:
        Path(args.out).write_text(line + "\n")
    return 0 if doc["trained"] and doc["within"] else 1


if __name__ == "__main__":
    sys.exit(main())
