#!/usr/bin/env python3
"""Scaling: the example's workload on 1, 2, 4 and 8 GPUs, in both layouts, through the CLI.

  node      `dali-launch train --gpus-per-node N`: one process drives the node's N GPUs.
  process   `dali-launch --local --gpus-per-node N --processes N`: one process per GPU.

Every run is the example's workload (Fashion-MNIST, its MLP, SGD with momentum) at the example's 50
images per GPU per step, so the global batch grows with N (weak scaling). Each run is a fresh CLI
process with an empty XLA compilation cache, so epoch 0 (one epoch) includes compiling. From its
metrics.jsonl and result.json the table gives: epoch 0's time, the mean epoch time of the later
epochs, images/s (in total and per GPU), the scaling efficiency against the 1-GPU run
of the same layout, test accuracy after one epoch and after the last, the share of the epoch spent
waiting for data, and whether every replica (all devices of all processes) ended with identical
parameters (result.json's SHA-256 per replica).

On the 8-GPU machine:

    dali-launch data prepare --from /usr/share/datasets/fashion-mnist --to /tmp/fmnist
    python benchmarks/scaling.py --data /tmp/fmnist --gpus 1,2,4,8 --layouts node,process --epochs 5 \
        --steps-per-call 24 --out benchmarks/results/scaling/h200-x2.json

GPU counts above what JAX sees are skipped (with a line saying so). A run that fails or times out
is recorded as failed with its last lines of stderr; the others still run, and the exit status is 1
(also when any run's replicas differ).

`--smoke-cpu` trains on CPU devices standing in for GPUs (`--platform cpu`; N CPU devices in one
process, or N processes of one) and skips the GPU count: it checks the script, its numbers mean
nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import (  # the same folder: run as a script
    PARALLEL,
    listed,
    read_epochs,
    steady_label,
    summarize,
)

LAYOUTS = ("node", "process")
TAIL_LINES = 20  # of a failed run's stderr, kept in the JSON
STOP_MARGIN_S = 60  # local mode stops its ranks itself at --timeout-s (killing it would orphan them); a backstop


def visible_gpus() -> int:
    """GPUs JAX sees, counted in a child: JAX in this process would hold on to the GPUs the runs need."""
    probe = "import jax; print(len(jax.devices('gpu')))"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        print("counting GPUs timed out; taking 0", flush=True)
        return 0
    if proc.returncode != 0:
        print(f"JAX sees no GPU: {(proc.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
        return 0
    return int(proc.stdout.split()[-1])


def cli_args(args: argparse.Namespace, gpus: int, layout: str, run_root: Path, cache: Path) -> list[str]:
    """The dali-launch arguments of one run; batch stays the default 50 per device (weak scaling)."""
    where = (
        ["train", "--gpus-per-node", str(gpus)]
        if layout == "node"
        else [
            "--local",
            "--gpus-per-node",
            str(gpus),
            "--processes",
            str(gpus),
            "--local-timeout-s",
            str(args.timeout_s),
        ]
    )
    return [
        *where,
        "--data-dir",
        str(args.data.absolute()),
        "--epochs",
        str(args.epochs),
        "--steps-per-call",
        str(args.steps_per_call),
        "--reader-threads",
        str(args.reader_threads),
        "--parallel",
        args.parallel,
        "--cuda-graphs",
        args.cuda_graphs,
        "--platform",
        "cpu" if args.smoke_cpu else "gpu",
        "--run-root",
        str(run_root),
        "--compile-cache",
        str(cache),
        "--name",
        f"scaling-{gpus}-{layout}",
    ]


def execute(command: list[str], timeout_s: float) -> tuple[int | None, str, float]:
    """Exit code (None: timed out), stderr, and wall seconds of one CLI run."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, err, time.perf_counter() - start
    return proc.returncode, proc.stderr or proc.stdout, time.perf_counter() - start


def run_one(args: argparse.Namespace, gpus: int, layout: str, root: Path) -> dict:
    name = f"{gpus}-{layout}"
    cache = Path(tempfile.mkdtemp(prefix=f"xla-{name}-", dir=root))  # empty: epoch 0 compiles, every time
    command = [sys.executable, "-m", "dali_launch.launcher.cli", *cli_args(args, gpus, layout, root / name, cache)]
    record = {"gpus": gpus, "layout": layout, "command": ["dali-launch", *command[3:]]}
    print(f"{name}: {' '.join(record['command'])}", flush=True)
    earlier = set((root / name).glob("*"))  # a reused --work-dir holds earlier runs
    code, err, record["wall_s"] = execute(command, args.timeout_s + (STOP_MARGIN_S if layout == "process" else 0))
    run_dirs = [p for p in set((root / name).glob("*")) - earlier if (p / "result.json").is_file()]
    if code != 0 or not run_dirs:
        why = f"timed out after {args.timeout_s} s" if code is None else f"exit {code}" if code else "no result.json"
        record.update(failed=True, error=why, stderr_tail=err.strip().splitlines()[-TAIL_LINES:])
        print(f"  FAILED ({why}):\n    " + "\n    ".join(record["stderr_tail"]), flush=True)
        return record
    record["run_dir"] = str(run_dirs[0])
    record.update(measure(run_dirs[0], gpus))
    s = record["summary"]
    print(
        f"  {record['wall_s']:.0f} s: epoch {s['train_s']:.3f} s, {s['train_images_per_s']:,.0f} images/s, "
        f"accuracy {s['final_accuracy']:.4f}, {s['replicas']} replicas"
        f"{'' if s['replicas_identical'] else ' that DIFFER'}",
        flush=True,
    )
    return record


def measure(run_dir: Path, gpus: int) -> dict:
    """A finished run's numbers from metrics.jsonl and result.json."""
    epochs = read_epochs(run_dir / "metrics.jsonl")
    checksums = json.loads((run_dir / "result.json").read_text())["checksums"]
    summary = summarize({"epochs": epochs})
    summary.update(
        images_per_s_per_gpu=summary["train_images_per_s"] / gpus,
        epoch0_accuracy=epochs[0]["test_accuracy"],
        replicas=len(checksums),
        replicas_identical=len(checksums) == gpus and len(set(checksums)) == 1,
    )
    return {"summary": summary, "epochs": epochs, "checksums": checksums}


def add_efficiency(runs: list[dict]) -> None:
    """images/s at N over N times the same layout's 1-GPU images/s; None without that run."""
    base = {r["layout"]: r["summary"]["train_images_per_s"] for r in runs if r["gpus"] == 1 and "summary" in r}
    for r in runs:
        if "summary" in r:
            one = base.get(r["layout"])
            r["summary"]["efficiency"] = r["summary"]["train_images_per_s"] / (r["gpus"] * one) if one else None


def table(runs: list[dict], epochs: int) -> str:
    head = (
        f"{'gpus':>4}  {'layout':<25}{'epoch 0 s':>10}{'epoch s':>9}{'images/s':>11}{'per GPU':>9}"
        f"{'efficiency':>11}{'acc@1':>8}{f'acc@{epochs}':>8}{'data wait':>10}  replicas"
    )
    rows = [head, "-" * len(head)]
    for r in runs:
        procs = (1, r["gpus"]) if r["layout"] == "node" else (r["gpus"], 1)
        where = f"{r['layout']:<8}{procs[0]} proc x {procs[1]} GPU"
        s = r.get("summary")
        if s is None:
            rows.append(f"{r['gpus']:>4}  {where:<25}FAILED ({r['error']}): {(r['stderr_tail'] or [''])[-1][:100]}")
            continue
        eff = "-" if s["efficiency"] is None else f"{s['efficiency']:.2f}"
        same = f"{s['replicas']} {'identical' if s['replicas_identical'] else 'DIFFER'}"
        rows.append(
            f"{r['gpus']:>4}  {where:<25}{s['epoch0_train_s']:>10.2f}{s['train_s']:>9.3f}"
            f"{s['train_images_per_s']:>11,.0f}{s['images_per_s_per_gpu']:>9,.0f}{eff:>11}"
            f"{s['epoch0_accuracy']:>8.4f}{s['final_accuracy']:>8.4f}{s['data_wait_fraction']:>10.1%}  {same}"
        )
    return "\n".join(rows)


def footer(epochs: int) -> str:
    return "\n".join(
        [
            "epoch 0 s: the first epoch, compiling included (empty XLA cache); "
            f"epoch s, images/s, data wait: means over {steady_label(epochs)}",
            "images/s: training images per second over all GPUs; per GPU: that / N (50 images per GPU per step)",
            "efficiency: images/s at N / (N x images/s of the same layout's 1-GPU run); 1.00 is linear, - no 1-GPU run",
            f"acc@1, acc@{epochs}: test accuracy after the first and the last epoch; data wait: share of the epoch "
            "spent waiting for DALI",
            "replicas: parameter SHA-256s at the end, one per device of every process; identical = N of them, all "
            "equal",
        ]
    )


def environment(runs: list[dict]) -> dict:
    """Versions and devices from the first finished run's manifest (this process never imports JAX)."""
    done = next((r for r in runs if r.get("run_dir")), None)
    if done is None:
        return {}
    manifest = json.loads((Path(done["run_dir"]) / "manifest.json").read_text())
    devices = manifest["topology"]["devices"]
    return {
        "packages": manifest["packages"],
        "source": manifest["source"],
        "platform": manifest["platform"],
        "device_kind": devices[0]["kind"] if devices else None,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="Folder with training/ and testing/ Caffe2 LMDBs.")
    parser.add_argument("--gpus", type=listed(int), default="1,2,4,8", help="GPU counts (default 1,2,4,8).")
    parser.add_argument(
        "--layouts",
        type=listed(choices=LAYOUTS),
        default="node,process",
        help="node: one process with N GPUs; process: N processes of one GPU (default both).",
    )
    parser.add_argument("--epochs", type=int, default=5, help="Epochs per run (default 5).")
    parser.add_argument("--steps-per-call", type=int, default=0, help="dali-launch --steps-per-call (default 0: auto).")
    parser.add_argument("--reader-threads", type=int, default=2, help="dali-launch --reader-threads (default 2).")
    parser.add_argument(
        "--parallel",
        choices=PARALLEL,
        default="sharded",
        help="dali-launch --parallel (default sharded, the trainer's).",
    )
    parser.add_argument(
        "--cuda-graphs", choices=("auto", "on", "off"), default="auto", help="dali-launch --cuda-graphs (default auto)."
    )
    parser.add_argument("--timeout-s", type=int, default=900, help="Seconds one run may take (default 900).")
    parser.add_argument("--out", type=Path, help="Write the table and every run's numbers and command as JSON.")
    parser.add_argument("--work-dir", type=Path, help="Where the runs' directories go (default: a new temp dir).")
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU devices stand in for GPUs: checks the script.")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    missing = [split for split in ("training", "testing") if not (args.data / split / "data.mdb").is_file()]
    if missing:  # every run would fail the same way
        parser.error(
            f"no {' or '.join(missing)} LMDB in {args.data}; make them with "
            f"`dali-launch data prepare --from IDX_DIR --to {args.data}`"
        )
    return args


def planned(args: argparse.Namespace) -> list[tuple[int, str]]:
    """(gpus, layout) of every run; counts above the visible GPUs are dropped, saying so."""
    available = None if args.smoke_cpu else visible_gpus()
    counts = sorted(set(args.gpus))
    for n in counts:
        if available is not None and n > available:
            print(f"skipping {n} GPUs: JAX sees {available}", flush=True)
    return [(n, layout) for n in counts if available is None or n <= available for layout in args.layouts]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = (args.work_dir or Path(tempfile.mkdtemp(prefix="scaling-"))).absolute()
    root.mkdir(parents=True, exist_ok=True)
    print(f"run directories under {root}", flush=True)
    runs = [run_one(args, gpus, layout, root) for gpus, layout in planned(args)]
    add_efficiency(runs)
    text = table(runs, args.epochs)
    print("\n" + text + "\n" + footer(args.epochs), flush=True)
    if args.out:
        doc = {
            "argv": [sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
            "environment": environment(runs),
            "epochs": args.epochs,
            "table": text,
            "footer": footer(args.epochs),
            "runs": runs,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.out}")
    if not runs:
        print("nothing ran: no GPU count asked for is available")
    bad = [r for r in runs if r.get("failed") or not r["summary"]["replicas_identical"]]
    return 1 if bad or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
