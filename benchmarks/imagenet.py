#!/usr/bin/env python3
"""Issues 18 and 31: an image model in bf16 on ImageNet-class JPEGs, 224x224, batch 256 per GPU, in one run.

    step      the trainer's own device call (trainer/step/parallel.py) on a batch already on the
              devices, again and again: the ceiling, no input at all (with --mixup/--cutmix: mixing
              included, it is part of the step; `step-unmixed` the same call without it, so the two
              differ by what mixing on the device costs, the most a DALI-side mixing could save)
    data      the trainer's own DALI pipelines (trainer/data/dali.py) with the task's resolved
              settings, --augment included, read as fast as they go: the input's rate alone;
              `data-global` the same in --sample-order global (records read by Python into an
              external source: the price of elastic resume)
    train     `dali-launch train ... --pipeline folders --model M --precision bf16 [--augment ...]` with
              every other flag at its default, in a fresh process: images/s per GPU of the epochs after
              the first (which compiles), the share of them spent waiting for DALI, test accuracy
              after the last epoch (the synthetic classes are learnable: chance is 1/classes)

--model resnet50 (the default: MLPerf's workload, SGD) or vit-s16 / vit-b16 (DeiT's recipe: AdamW), with --augment, --mixup and --cutmix as the
trainer's flags. Each GPU count in --gpus runs every part; with 2 GPUs `train` runs in both layouts
(node: one process drives both, `dali-launch train --gpus-per-node 2`; process: `dali-launch --local
--gpus-per-node 2 --processes 2`), and the scaling efficiency is its images/s over twice the 1-GPU
run's. Every part runs in a child process of its own: JAX in this one would hold the GPUs; the step
part leaves its program in XLA's persistent cache, where the train run finds it.
`--decoded-cache auto,off` runs `train` once per value (the cache's effect, in one run; the table says what
each resolved to); `--extra '--checkpoint-every-steps 100'` adds flags to every `train` run (the table's
ckpt wait: the share of the epochs the step waited for checkpoints).

On the GPU machine (16 cores per GPU; `dali-launch data synth` writes the data once, ~50k images):

    python benchmarks/imagenet.py --data /tmp/synth --gpus 1,2 \
        --out benchmarks/results/imagenet/h200-x2.json --plot benchmarks/results/imagenet/h200-x2.png
    python benchmarks/imagenet.py --data /tmp/synth --gpus 1 --model vit-s16 --augment randaugment \
        --mixup 0.8 --cutmix 1.0 --parts step,step-unmixed,data,train --out vit-s16.json

`--smoke-cpu` runs it on CPU devices with tiny images and a small model (the built-in cnn for ResNet-50:
its test took 43 s against resnet18's 128 s on 2 busy cores; vit-ti16 for a ViT): it checks the script,
its numbers mean nothing.
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

from report import environment, listed

CLI = [sys.executable, "-m", "dali_launch.launcher.cli"]
TIMEOUT_S = 900
WORKLOAD = {  # MLPerf's: ResNet-50 v1.5, bf16, batch 256 per GPU, 224x224 random resized crops
    "model": "resnet50",
    "precision": "bf16",
    "batch_size": 256,
    "image_size": 224,
}
SMOKE = {"model": "cnn", "precision": "bf16", "batch_size": 8, "image_size": 32}
SMOKE_MODELS = {"resnet50": "cnn", "vit-s16": "vit-ti16", "vit-b16": "vit-ti16"}  # CPU-sized stand-ins
VIT_RECIPE = {"optimizer": "adamw", "learning_rate": 1e-3, "weight_decay": 0.05}  # DeiT's step-alone recipe


def workload_of(args) -> dict:
    """The flags every part runs with: the model's, and the recipe's given ones (--augment, --mixup, ...)."""
    workload = {**(SMOKE if args.smoke_cpu else WORKLOAD)}
    workload["model"] = SMOKE_MODELS[args.model] if args.smoke_cpu else args.model
    if args.model.startswith("vit"):
        workload |= VIT_RECIPE
    recipe = {"augment": args.augment, "mixup": args.mixup, "cutmix": args.cutmix, "attention": args.attention}
    defaults = {"augment": "none", "mixup": 0.0, "cutmix": 0.0, "attention": "auto"}
    return workload | {k: v for k, v in recipe.items() if v != defaults[k]}


def task_spec(data: Path, workload: dict, classes: int, gpus: int, platform: str, order: str = "shards"):
    """The spec `dali-launch train` would make of these flags (defaults for everything else)."""
    import dataclasses

    from dali_launch.trainer.config import DataConfig, DistributedConfig, Layout, TaskSpec, replaced, tables_of_keys

    names = lambda cls: {f.name for f in dataclasses.fields(cls)}
    of = lambda cls: {k: v for k, v in workload.items() if k in names(cls)}
    spec = TaskSpec(
        run_dir="unused",
        data=DataConfig(
            data_dir=str(data), pipeline="folders", num_classes=classes, sample_order=order, **of(DataConfig)
        ),
        distributed=DistributedConfig(platform=platform),
        layout=Layout(local_device_count=gpus),
    )
    return replaced(spec, **{k: v for k, v in workload.items() if k in tables_of_keys()})


def pipelines_and_step(spec, gpus: int):
    """The trainer's pipelines, device call and placed state for `gpus` devices of this process."""

    import jax

    from dali_launch.trainer.data import dali, shards
    from dali_launch.trainer.data.batches import Readers
    from dali_launch.trainer.parts import Parts
    from dali_launch.trainer.plan import alone, plan
    from dali_launch.trainer.plan.step import parallel as choose_parallel
    from dali_launch.trainer.resilience.checkpoint import zero_tally
    from dali_launch.trainer.step import parallel
    from dali_launch.trainer.step.initial_state import create_train_state
    from dali_launch.trainer.step.sgd import call_tally

    devices = jax.local_devices()[:gpus]
    inputs = alone(spec, devices)
    parts = Parts(inputs, plan(inputs))  # --attention decided, as set_up.py
    decided, step = parts.plan, parts.plan.step
    sharding = shards.Sharding(0, gpus, gpus, decided.data.readers_per_device)
    start = dali.Start(spec.data.sample_order, spec.step.seed, gpus, step.batch_per_device_step, step.steps_per_call)
    split = dali.Split(f"{spec.data.data_dir}/training", True, step.call_batch, spec.step.seed)
    data = dali.build(split, Readers(devices, devices, sharding), decided.data, start=start)
    fresh = create_train_state(spec, data.first_sample("images"), data.steps * step.steps_per_call, parts.made())
    mode_name = choose_parallel(spec.step.parallel, bool(fresh.collections), gpus)
    how = parallel.How(readers=sharding.readers)
    mode = parallel.create(mode_name, devices, devices, step.batch_per_device_step, data.sharding_spec, how)
    state = mode.place(fresh)
    tally = data.put([call_tally(zero_tally(fresh.recipe.task.metrics), fresh.recipe.task)] * gpus)
    return decided, data, mode, state, tally


PARTS = ("step", "step-unmixed", "data", "data-global")


def part(name: str, spec, gpus: int, calls: int) -> dict:
    """One part, in this (child) process: `step` or `data`, timed over `calls` device calls after a warm-up."""
    import jax

    from dali_launch.trainer import compile_cache
    from dali_launch.trainer.config import replaced

    if os.environ.get(compile_cache.ENV):  # where the `train` runs look (main's): they skip the step's compile
        compile_cache.point_jax_at(Path(os.environ[compile_cache.ENV]))
    if name == "step-unmixed":  # the same step without --mixup/--cutmix: mixing's cost on the device
        spec = replaced(spec, mixup=0.0, cutmix=0.0)
    decided, data, mode, state, tally = pipelines_and_step(spec, gpus)
    batch = data.next()
    if name.startswith("step"):  # the data part's `run` reads, the step parts reuse one batch
        run = lambda state, tally: mode.call(state, tally, batch)
    else:
        run = lambda state, tally: (state, data.next())
    for _ in range(3):  # compile, and fill DALI's queues
        state, tally = run(state, tally)
    jax.block_until_ready(tally)
    start = time.perf_counter()
    for _ in range(calls):
        state, tally = run(state, tally)
    jax.block_until_ready(tally)
    seconds = time.perf_counter() - start
    images = calls * decided.step.call_batch * gpus
    return {
        "part": name,
        "gpus": gpus,
        "images_per_s_per_gpu": images / seconds / gpus,
        "resolved": decided.record() | {"parallel": mode.name},
    }


def child_part(args, name: str, gpus: int) -> dict:
    """`part` in a child process (this script again), its result read from stdout's last line."""
    argv = [sys.executable, __file__, "--part", name, "--gpus", str(gpus), "--data", str(args.data)]
    argv += ["--classes", str(args.classes), "--calls", str(args.calls)] + (["--smoke-cpu"] if args.smoke_cpu else [])
    argv += ["--model", args.model, "--augment", args.augment, "--mixup", str(args.mixup), "--cutmix", str(args.cutmix)]
    argv += ["--attention", args.attention]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    if proc.returncode:
        return {"part": name, "gpus": gpus, "error": proc.stderr.strip().splitlines()[-5:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def train_flags(args, workload: dict, cache: str = "auto") -> list[str]:
    flags = ["--pipeline", "folders", "--data-dir", str(args.data), "--num-classes", str(args.classes)]
    flags += ["--epochs", str(args.epochs), "--decoded-cache", cache, *args.extra.split()]
    for key, value in workload.items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags + (["--platform", "cpu"] if args.smoke_cpu else ["--platform", "gpu"])


def train(args, workload: dict, gpus: int, layout: str, root: Path, cache: str = "auto") -> dict:
    """`dali-launch` end to end, in a fresh process; the figures from its metrics.jsonl."""
    where = ["train"] if layout == "node" else ["--local", "--processes", str(gpus)]
    run_root = root / f"{gpus}-{layout}-cache-{cache}"
    flags = train_flags(args, workload, cache)
    argv = [*CLI, *where, "--gpus-per-node", str(gpus), *flags, "--run-root", str(run_root)]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    row = {
        "part": "train",
        "gpus": gpus,
        "layout": layout,
        "argv": argv[len(CLI) :],
        "wall_s": time.perf_counter() - start,
    }
    metrics = list(run_root.glob("*/metrics.jsonl"))
    if proc.returncode or not metrics:
        return {**row, "error": (proc.stderr or proc.stdout).strip().splitlines()[-8:]}
    epochs = [json.loads(line) for line in metrics[0].read_text().splitlines()]
    ranks = json.loads((metrics[0].parent / "rank_map.json").read_text())
    steady = epochs[1:] or epochs
    mean = lambda key: sum(e[key] for e in steady) / len(steady)
    return {
        **row,
        "cache": cache,
        "decoded_cache": ranks[0]["resolved"]["decoded_cache_note"],  # what --decoded-cache resolved to
        "checkpoint_wait_fraction": sum(e["checkpoint_wait_s"] or 0 for e in steady)
        / sum(e["epoch_time_s"] for e in steady),
        "first_eval_s": epochs[0]["eval_time_s"],
        "parallel": ranks[0]["resolved"]["parallel"],  # what the defaults resolved to
        "images_per_s_per_gpu": mean("images_per_s_per_device"),
        "data_wait_fraction": mean("data_wait_fraction"),
        "host_wait_fraction": mean("host_wait_fraction"),
        "first_step_s": epochs[0].get("first_step_s"),
        "test_accuracy": epochs[-1]["test_accuracy"],
        "chance": 1 / args.classes,
        "epochs": epochs,
    }


def synth(args) -> None:
    """The data set, written once (`dali-launch data synth`): kept between runs of the benchmark."""
    if (args.data / "training").is_dir():
        return
    test = max(args.classes * 10, args.synth // 10)
    argv = [*CLI, "data", "synth", str(args.data), "--format", "folders", "--train", str(args.synth)]
    argv += ["--test", str(test), "--classes", str(args.classes)] + (["--image-scale", "0.1"] if args.smoke_cpu else [])
    start = time.perf_counter()
    subprocess.run(argv, check=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    print(f"data synth: {args.synth} training images in {time.perf_counter() - start:.0f} s", flush=True)


def add_scaling(rows: list[dict]) -> None:
    one = next((r for r in rows if r["part"] == "train" and r["gpus"] == 1 and "error" not in r), None)
    for r in rows:
        if r["part"] == "train" and one and "error" not in r:
            r["scaling"] = r["images_per_s_per_gpu"] / one["images_per_s_per_gpu"]


def table(rows: list[dict], workload: dict | None = None) -> str:
    head = f"{'GPUs':>4}  {'layout':<8}{'train img/s/GPU':>16}{'step only':>11}{'unmixed':>9}{'data only':>11}"
    head += f"{'global':>9}{'train/step':>11}{'data wait':>10}{'host wait':>10}{'scaling':>9}{'accuracy':>10}"
    head += f"{'ckpt wait':>10}{'eval 0 s':>9}  decoded cache"
    lines = ([workload_line(workload, rows)] if workload else []) + [head, "-" * len(head)]
    fig = lambda v, f: "-" if v is None else format(v, f)
    for gpus in sorted({r["gpus"] for r in rows}):
        rate = {r["part"]: r.get("images_per_s_per_gpu") for r in rows if r["gpus"] == gpus and r["part"] != "train"}
        step, data, data_global = rate.get("step"), rate.get("data"), rate.get("data-global")
        for r in [r for r in rows if r["gpus"] == gpus and r["part"] == "train"] or [{"layout": "-"}]:
            mine = r.get("images_per_s_per_gpu")
            lines.append(
                f"{gpus:>4}  {r['layout']:<8}{fig(mine, ',.0f'):>16}{fig(step, ',.0f'):>11}"
                f"{fig(rate.get('step-unmixed'), ',.0f'):>9}{fig(data, ',.0f'):>11}"
                f"{fig(data_global, ',.0f'):>9}"
                f"{fig(mine / step if mine and step else None, '.2f'):>11}"
                f"{fig(r.get('data_wait_fraction'), '.1%'):>10}{fig(r.get('host_wait_fraction'), '.1%'):>10}"
                f"{fig(r.get('scaling'), '.2f'):>9}"
                f"{fig(r.get('test_accuracy'), '.3f'):>10}"
                f"{fig(r.get('checkpoint_wait_fraction'), '.1%'):>10}{fig(r.get('first_eval_s'), '.1f'):>9}"
                f"  {r.get('decoded_cache', '-')}"
            )
    errors = [f"{r['part']} {r['gpus']} GPU(s) {r.get('layout', '')}: {r['error']}" for r in rows if "error" in r]
    notes = [
        "train: epochs after the first, which compiles; step only: the same device call on a batch already on the "
        "GPUs (mixing included; unmixed: without it); data only: the same DALI pipelines alone, augmentation "
        "included (global: in --sample-order global); scaling: train img/s/GPU over the 1-GPU run's"
    ]
    return "\n".join(lines + notes + errors)


def workload_line(workload: dict, rows: list[dict]) -> str:
    """What ran, and what the task resolved for it (the attention's implementation, where DALI decodes)."""
    resolved = next((r["resolved"] for r in rows if "resolved" in r), {})
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in workload.items())
    chosen = ", ".join(f"{k} {resolved[k]}" for k in ("attention", "decoder", "parallel") if resolved.get(k))
    return f"{flags}" + (f" (resolved: {chosen})" if chosen else "")


def plot(rows: list[dict], path: Path, model: str = "resnet50") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label = lambda r: f"{r['gpus']} GPU {r['part']}" + (f" ({r['layout']})" if "layout" in r else "")
    bars = [(label(r), r) for r in rows if "error" not in r]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(bars)), layout="constrained")
    colours = {"train": "tab:blue", "step": "tab:grey", "step-unmixed": "tab:olive", "data": "tab:orange"}
    colours["data-global"] = "tab:red"
    for i, (_, r) in enumerate(bars):
        bar = ax.barh(i, r["images_per_s_per_gpu"], color=colours[r["part"]])
        ax.bar_label(bar, labels=[f"{r['images_per_s_per_gpu']:,.0f}"], padding=3)
    ax.set_yticks(range(len(bars)), [label for label, _ in bars])
    ax.invert_yaxis()
    ax.set_xlabel(f"images/s per GPU ({model}, bf16, batch 256 per GPU, 224x224)")
    ax.margins(x=0.15)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="JPEG class folders (training/, testing/).")
    # 51,200 = 40 whole device calls of 5 x 256: no epoch ends on a call that is mostly padding (50,000
    # would end on one 6 % full, -2.4 % images/s), as ImageNet's 1.28 M do not (the last call of 1,001).
    parser.add_argument("--synth", type=int, default=51_200, help="Training images to synthesise if --data is empty.")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--gpus", type=listed(int), default="1,2")
    parser.add_argument("--parts", type=listed(choices=(*PARTS, "train")), default="step,data,data-global,train")
    parser.add_argument("--model", choices=("resnet50", "vit-s16", "vit-b16"), default="resnet50")
    parser.add_argument("--augment", choices=("none", "randaugment", "trivialaugment", "autoaugment"), default="none")
    parser.add_argument("--mixup", type=float, default=0.0, help="Mixup's alpha (0: off), in the step.")
    parser.add_argument("--cutmix", type=float, default=0.0, help="CutMix's alpha (0: off), in the step.")
    parser.add_argument("--attention", choices=("auto", "xla", "cudnn", "cudnn-padded"), default="auto")
    parser.add_argument("--epochs", type=int, default=3, help="Epochs of each `train` run (the first compiles).")
    parser.add_argument("--calls", type=int, default=30, help="Device calls timed in the step and data parts.")
    parser.add_argument(
        "--decoded-cache",
        type=listed(),
        default="auto",
        help="--decoded-cache of each `train` run, e.g. auto,off (its effect in one run) or 20G.",
    )
    parser.add_argument(
        "--extra", default="", help="More flags for every `train` run, e.g. '--checkpoint-every-steps 100'."
    )
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # a child's one part
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU devices, tiny images: checks the script only.")
    args = parser.parse_args(argv)
    args.data = args.data.absolute()
    workload = workload_of(args)
    if args.smoke_cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={max(args.gpus)}"
    if args.part:
        platform, order = "cpu" if args.smoke_cpu else "gpu", "global" if args.part == "data-global" else "shards"
        print(
            json.dumps(
                part(
                    args.part,
                    task_spec(args.data, workload, args.classes, *args.gpus, platform, order),
                    *args.gpus,
                    args.calls,
                )
            )
        )
        return 0
    synth(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="imagenet-bench-") as root:
        os.environ.setdefault("DALI_LAUNCH_COMPILE_CACHE", str(Path(root) / "xla"))  # every part's, and every run's
        for gpus in args.gpus:
            rows += [child_part(args, name, gpus) for name in PARTS if name in args.parts]
            for layout in ("node", "process") if gpus > 1 else ("node",):
                for cache in args.decoded_cache if "train" in args.parts else []:
                    rows.append(train(args, workload, gpus, layout, Path(root), cache))
                    print(table(rows, workload), flush=True)
    add_scaling(rows)
    text = table(rows, workload)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"argv": sys.argv, "environment": environment(), "workload": workload, "table": text, "rows": rows}
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    if args.plot:
        plot(rows, args.plot, args.model)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
