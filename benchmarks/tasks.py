#!/usr/bin/env python3
"""Each built-in task through `dali-launch train` against its step alone: what its DALI input costs it.

    step    the task's own device call as the trainer builds it (trainer/parts.py: its pipelines, model and
            runner, every `auto` decided by the plan), on one batch already on the devices, again and again: the
            ceiling for this task, model and batch, no input at all
    input   the same pipelines alone (in the same child process, after the step part): images/s of their batches
            on the devices, in their first epoch and in their second (DALI's decoder cache, where the plan keeps
            one, decodes in the first alone); the input's ceiling, which must stay above the step's
    train   `dali-launch train --task T` with no speed flag, in a fresh process: images/s of the epochs after
            the first (which compiles), the share of them the step waited for DALI (`data wait`), and the
            host's time between two epochs (`between s`: evaluation, the epoch's line, the checkpoint where it
            was not hidden behind the next epoch's first calls: trainer/epoch_boundary.py)
    ratio   train / step: 1.0 where the input costs the step nothing

Each task reads a data set `dali-launch data synth` writes in its format once (kept under --data-root). On the
GPU machine (gpu.sh's `tasks` question; `audio` asks --tasks audio alone):

    python benchmarks/tasks.py --out benchmarks/results/tasks/h200.json
    python benchmarks/tasks.py --tasks audio --out /tmp/audio.json

`--smoke-cpu` runs every part on CPU devices with tiny images and data sets: it checks the script, its numbers
mean nothing.
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

CLI = [sys.executable, "-m", "dali_launch.launcher.cli"]
TIMEOUT_S = 900
# The data set each task reads (`data synth --format`), its classes, and the flags of its run: a batch that
# keeps an H200 busy, bf16, the recipes the tests and docs train each task with (docs/tasks.md).
TASKS = {
    "segmentation": ("segmentation", 4, {"image_size": 256, "batch_size": 64, "precision": "bf16"}),
    "detection": (
        "detection",
        3,
        {"image_size": 256, "batch_size": 64, "precision": "bf16", "optimizer": "adamw", "learning_rate": 0.003},
    ),
    "contrastive": ("folders", 10, {"image_size": 96, "batch_size": 256, "precision": "bf16", "learning_rate": 0.03}),
    # 8 frames of 64×64 a clip (data synth's at --image-scale 0.5 are 32×32: resized up on the device, as a
    # real set's frames are resized), st-cnn
    "video": ("video", 6, {"image_size": 64, "batch_size": 64, "precision": "bf16"}),
    # 1 s of 16 kHz sound a sample as 64 mel bins x 100 frames (the audio flags' defaults); sounds decode on the CPU
    "audio": ("audio", 10, {"batch_size": 256, "precision": "bf16"}),
}
SMOKE = {"image_size": 32, "batch_size": 8, "precision": "fp32"}  # CPU-sized: the script's paths only
# Images (sounds, clips) of each split, and their size against ImageNet's. An epoch's last call may be partly padding, computed
# as real rows are: at 4,096 images, 64 a step and 19 steps a call, 4,864 rows an epoch (0.84 of them real: most
# of segmentation's 0.82 and detection's 0.78 on an H200). The plan now fits the call to the epoch where it knows
# the count (plan/step.py: 16 calls of 16 steps hold 16,384 exactly), and the time between epochs, outside the
# epochs' own, is reported beside them.
SIZES = {"train": 16384, "test": 512, "scale": 0.5}
SMOKE_SIZES = {"train": 64, "test": 16, "scale": 0.1}


def flags_of(task: str, smoke: bool) -> dict:
    """The run's settings besides the task's data: its recipe, CPU-sized under --smoke-cpu."""
    _, classes, flags = TASKS[task]
    return {**flags, **(SMOKE if smoke else {}), "task": task, "num_classes": classes}


def synth(task: str, root: Path, smoke: bool) -> Path:
    """The task's data set, written once (`dali-launch data synth`), kept between runs of the benchmark."""
    fmt, classes, _ = TASKS[task]
    sizes = SMOKE_SIZES if smoke else SIZES
    out = root / f"{fmt}-{classes}-{sizes['train']}"
    if not (out / "training").is_dir():
        argv = [*CLI, "data", "synth", str(out), "--format", fmt, "--classes", str(classes)]
        argv += ["--train", str(sizes["train"]), "--test", str(sizes["test"]), "--image-scale", str(sizes["scale"])]
        subprocess.run(argv, check=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, capture_output=True)
    return out


def spec_of(task: str, data: Path, smoke: bool):
    """The task spec `dali-launch train` makes of these settings (the Python API's own conversion of them)."""
    from dali_launch.launcher.api.executor import Executor
    from dali_launch.launcher.run_config import task_spec, with_devices

    platform = {"platform": "cpu", "gpus_per_node": 1} if smoke else {"platform": "gpu"}
    run = Executor("here", **flags_of(task, smoke), **platform).run_config(data_dir=str(data))
    return task_spec(with_devices(run, here=True), tempfile.mkdtemp(prefix="tasks-bench-"), str(data), "train")


def step_alone(task: str, data: Path, smoke: bool, calls: int) -> dict:
    """The `step` part, in this (child) process: the trainer's device call on one batch, timed after a warm-up."""
    import jax

    from dali_launch.trainer.parts import Parts
    from dali_launch.trainer.plan import alone, plan
    from dali_launch.trainer.resilience.checkpoint import zero_tally
    from dali_launch.trainer.set_up import model_on
    from dali_launch.trainer.step.sgd import call_tally

    spec, devices = spec_of(task, data, smoke), jax.local_devices()
    inputs = alone(spec, devices)
    parts = Parts(inputs, plan(inputs))
    pipes = parts.pipelines()
    model = model_on(parts, parts.first_call_on(pipes, None), pipes.steps * parts.plan.step.steps_per_call)
    decided = parts.plan  # partitioned
    runner, batch = model.runners.runner, pipes.next()
    state = runner.place(model.initial.create())
    tally = pipes.put([call_tally(zero_tally(parts.task.metrics), parts.task)] * len(devices))
    for _ in range(3):  # compile, and settle
        state, tally = runner.call(state, tally, batch)
    jax.block_until_ready(tally)
    began = time.perf_counter()
    for _ in range(calls):
        state, tally = runner.call(state, tally, batch)
    jax.block_until_ready(tally)
    rows = decided.step.call_batch * len(devices)  # a call's, padding included
    step = {"part": "step", "images_per_s_per_device": calls * rows / (time.perf_counter() - began) / len(devices)}
    return step | {"input": input_alone(pipes, rows, len(devices)), **planned(decided, pipes)}


def input_alone(pipes, rows: int, devices: int) -> dict:
    """The pipelines' batches alone, on the devices: images/s per device over the rest of their first epoch (its
    first batch was the step part's) and over their whole second epoch."""
    import jax

    rates = []
    for calls in (pipes.steps - 1, pipes.steps):
        began = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(pipes.next())
        rates.append(calls * rows / max(time.perf_counter() - began, 1e-9) / devices)
    return {"first_epoch_images_per_s_per_device": rates[0], "images_per_s_per_device": rates[1]}


def planned(decided, pipes) -> dict:
    """What the plan chose that the figures depend on: the fusion, DALI's decoding and cache, and the share of an
    epoch's rows that is padding (computed like real ones, counted by none)."""
    step, data = decided.step, decided.data
    rows = pipes.steps * step.call_batch * pipes.sharding.global_devices
    return {
        "steps_per_call": step.steps_per_call,
        "decoder": data.decoder,
        "decoded_cache": data.decoded_cache_note,
        "padding": 1 - pipes.num_samples / rows,
    }


def child_step(args, task: str, data: Path) -> dict:
    """`step_alone` in a child process of its own (JAX in this one would hold the GPU the `train` run needs)."""
    argv = [sys.executable, __file__, "--step-of", task, "--data", str(data), "--calls", str(args.calls)]
    proc = subprocess.run(
        argv + (["--smoke-cpu"] if args.smoke_cpu else []),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode:
        return {"part": "step", "error": (proc.stderr or proc.stdout).strip().splitlines()[-6:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def train(args, task: str, data: Path, root: Path) -> dict:
    """`dali-launch train --task T ...` end to end, in a fresh process; its figures from metrics.jsonl."""
    flags = {**flags_of(task, args.smoke_cpu), "data_dir": data, "epochs": args.epochs, "run_root": root / task}
    flags |= {"platform": "cpu", "gpus_per_node": 1} if args.smoke_cpu else {"platform": "gpu"}
    argv = [*CLI, "train", *(f"--{k.replace('_', '-')}={v}" for k, v in flags.items())]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    row = {"part": "train", "argv": argv[len(CLI) :]}
    metrics = sorted((root / task).glob("*/metrics.jsonl"))
    if proc.returncode or not metrics:
        return {**row, "error": (proc.stderr or proc.stdout).strip().splitlines()[-8:]}
    epochs = [json.loads(line) for line in metrics[-1].read_text().splitlines() if line.strip()]
    steady = epochs[1:] or epochs
    mean = lambda key: sum(e[key] or 0 for e in steady) / len(steady)
    result = json.loads((metrics[-1].parent / "result.json").read_text())
    return {
        **row,
        "images_per_s_per_device": mean("images_per_s_per_device"),
        "data_wait_fraction": mean("data_wait_fraction"),
        "epoch_s": mean("epoch_time_s"),
        "between_epochs_s": mean("between_epochs_s"),  # the per-epoch cost beside the steps
        "checkpoint_behind_calls": [e["checkpoint_behind_calls"] for e in epochs],
        "final": result["final"],  # the task's own evaluation: its headline says it learned
    }


def measure(args, task: str) -> dict:
    data = synth(task, args.data_root, args.smoke_cpu)
    step = child_step(args, task, data)
    with tempfile.TemporaryDirectory() as root:
        trained = train(args, task, data, Path(root))
    row = {"task": task, "step": step, "train": trained}
    if "error" not in step and "error" not in trained:
        row["ratio"] = trained["images_per_s_per_device"] / step["images_per_s_per_device"]
    return row


def table(rows: list[dict]) -> str:
    head = "task           step img/s  input img/s  train img/s  ratio  data wait  epoch s  between s  padding"
    lines = [head]
    for r in rows:
        if "ratio" not in r:
            lines.append(f"{r['task']:<14} failed: {r['step'].get('error') or r['train'].get('error')}")
            continue
        step, train = r["step"], r["train"]
        s, i, t = (
            step["images_per_s_per_device"],
            step["input"]["images_per_s_per_device"],
            train["images_per_s_per_device"],
        )
        lines.append(
            f"{r['task']:<14} {s:>10,.0f} {i:>12,.0f} {t:>12,.0f}  {r['ratio']:>5.2f}  {train['data_wait_fraction']:>9.1%}"
            f"  {train['epoch_s']:>7.2f}  {train['between_epochs_s']:>9.3f}  {step['padding']:>7.1%}"
        )
    lines += [
        f"{r['task']}: {r['step']['steps_per_call']} steps a call, decoded cache {r['step']['decoded_cache']}"
        for r in rows
        if "decoded_cache" in r["step"]
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated, of " + ", ".join(TASKS))
    p.add_argument("--data-root", type=Path, default=Path(tempfile.gettempdir()) / "dali-launch-task-data")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--calls", type=int, default=20, help="device calls the step part times")
    p.add_argument("--out", type=Path, help="the rows as JSON")
    p.add_argument("--smoke-cpu", action="store_true")
    p.add_argument("--step-of", help=argparse.SUPPRESS)  # the child process of one task's step part
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.step_of:
        if args.smoke_cpu:
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
        print(json.dumps(step_alone(args.step_of, args.data, args.smoke_cpu, args.calls)))
        return 0
    unknown = [t for t in args.tasks.split(",") if t not in TASKS]
    if unknown:
        p.error(f"unknown --tasks {','.join(unknown)}; use of {', '.join(TASKS)}")
    rows = []
    for task in args.tasks.split(","):
        rows.append(measure(args, task))
        if args.out:  # after each task: a run cut short keeps the tasks it measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"argv": sys.argv, "rows": rows}, indent=2) + "\n")
    print(table(rows), flush=True)
    return 0 if all("ratio" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
