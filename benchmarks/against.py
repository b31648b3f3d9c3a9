#!/usr/bin/env python3
"""The defaults against named older code, in one run: the guard against the next slow-down.

Every contender is `dali-launch train --data-dir DATA --epochs E` in a fresh process and run root:

    head        this tree's code with no flags: what a user gets
    NAME=FLAGS  (--variant) this tree's code with FLAGS, e.g. `off=--decoded-cache off`
    NAME=DIR    (--code) the code in DIR (its launcher/ and trainer/: `git archive COMMIT launcher trainer`)
    example     (--example) NVIDIA's notebook code (example.py) on the same data, in a process of its own

The contenders run --passes times, the order reversed every other pass (ABBA: a machine that warms up or
slows down favours none). A contender's figure is the mean training epoch over epochs 1..E-1 of all its
passes (epoch 0 compiles). PASS when head's is at most --max-ratio times every --code contender's.
--py-spy NAME,... runs those contenders once more under py-spy (where it is installed), after the timed passes and
outside the figures: collapsed stacks per thread, idle ones too, in OUT_DIR/OUT-NAME.pyspy.txt.

On the GPU machine (docs/performance.md; OLD: `git archive f9d8d52 launcher trainer | tar x -C OLD`):

    python benchmarks/against.py --data /tmp/fmnist --code f9d8d52=OLD --variant off="--decoded-cache off" \
        --example --passes 2 --out benchmarks/results/against/h200.json

`--smoke-cpu` runs it on one CPU device with the embedded data set: it checks the script only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import checksums, code_env, environment

CLI = [sys.executable, "-m", "dali_launch.launcher.cli"]
TIMEOUT_S = 600
HERE = Path(__file__).resolve().parent


def contenders(args, root: Path) -> list[dict]:
    rows = [{"name": "head", "flags": [], "env": {}}]
    rows += [{"name": n, "flags": f.split(), "env": {}} for n, f in args.variant]
    rows += [{"name": n, "flags": [], "env": code_env(Path(d), root / f"code-{n}")} for n, d in args.code]
    if args.example:
        rows.append({"name": "example", "flags": [], "env": {}, "example": True})
    return rows


def argv_of(args, row: dict, run_root: Path) -> list[str]:
    if row.get("example"):
        call = f"run_example(Path({str(args.data)!r}), {args.epochs}, {not args.smoke_cpu})"
        code = f"import sys, json; from pathlib import Path; sys.path.insert(0, {str(HERE)!r}); from example import run_example"
        return [sys.executable, "-c", f"{code}; print('RESULT' + json.dumps({call}))"]
    platform = "cpu" if args.smoke_cpu else "gpu"
    data = ["--data-dir", str(args.data)] if args.data else []
    return [*CLI, "train", *data, "--epochs", str(args.epochs), "--run-root", str(run_root), "--platform", platform]


def profiled(argv: list[str], out: Path) -> list[str]:
    spy = shutil.which("py-spy")
    # raw: collapsed stacks per thread, idle ones too (the main thread waiting in DALI releases the GIL)
    record = [spy, "record", "--rate", "250", "--format", "raw", "--threads", "--idle", "-o", str(out), "--"]
    return [*record, *argv] if spy else argv


def run_once(args, row: dict, root: Path, pass_: int) -> dict:
    """One contender's run: its per-epoch training seconds and data-wait fractions."""
    run_root = root / f"{row['name']}-{pass_}"
    argv = [*argv_of(args, row, run_root), *row["flags"]]
    if pass_ < 0:
        argv = profiled(argv, args.out.with_suffix("").parent / f"{args.out.stem}-{row['name']}.pyspy.txt")
    start = time.perf_counter()
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **row["env"]},
    )
    result = {"pass": pass_, "wall_s": time.perf_counter() - start}
    if proc.returncode:
        return {**result, "error": (proc.stderr or proc.stdout).strip().splitlines()[-8:]}
    if row.get("example"):
        epochs = json.loads(proc.stdout.split("RESULT", 1)[1])["epochs"]
        return {
            **result,
            "train_s": [e["train_s"] for e in epochs],
            "data_wait": [e["data_wait_fraction"] for e in epochs],
        }
    metrics = next(run_root.glob("*/metrics.jsonl"))
    epochs = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    ranks = next(run_root.glob("*/rank_map.json"), None)
    resolved = json.loads(ranks.read_text())[0].get("resolved", {}) if ranks else {}  # rank 0's
    return {
        **result,
        "train_s": [e["epoch_time_s"] for e in epochs],
        "data_wait": [e["data_wait_fraction"] for e in epochs],
        "first_step_s": epochs[0].get("first_step_s"),
        "decoded_cache": resolved.get("decoded_cache"),
        "checksums": checksums(metrics.parent),
    }


def summary(rows: list[dict], max_ratio: float) -> dict:
    steady = lambda runs: [s for r in runs if "train_s" in r and r["pass"] >= 0 for s in r["train_s"][1:]]
    mean = {r["name"]: sum(v) / len(v) for r in rows if (v := steady(r["runs"]))}
    head = mean.get("head")
    ratios = {name: head / value for name, value in mean.items() if head and name != "head"}
    older = [r["name"] for r in rows if r["env"]]
    ok = head is not None and all(ratios.get(n, float("inf")) <= max_ratio for n in older)
    return {"mean_train_s": mean, "head_over": ratios, "pass": ok, "max_ratio": max_ratio}


def table(rows: list[dict], result: dict) -> str:
    lines = [f"{'contender':<14}{'epoch s (1..)':>14}{'head/this':>10}{'data wait':>10}  epochs by pass"]
    for r in rows:
        mean, ratio = result["mean_train_s"].get(r["name"]), result["head_over"].get(r["name"])
        waits = [w for run in r["runs"] for w in run.get("data_wait", [])[1:]]
        per_pass = " | ".join(
            " ".join(f"{s:.3f}" for s in run["train_s"]) if "train_s" in run else "failed" for run in r["runs"]
        )
        fig = lambda v, f: "-" if v is None else format(v, f)
        wait = sum(waits) / len(waits) if waits else None
        lines.append(f"{r['name']:<14}{fig(mean, '.3f'):>14}{fig(ratio, '.2f'):>10}{fig(wait, '.1%'):>10}  {per_pass}")
    lines.append(f"PASS: {result['pass']} (head at most {result['max_ratio']:.2f}x every --code contender)")
    return "\n".join(lines)


def named(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=VALUE")
    return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="--data-dir of every run (default: the embedded MNIST set).")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--code", type=named, action="append", default=[], help="NAME=DIR: older code to time.")
    parser.add_argument("--variant", type=named, action="append", default=[], help="NAME=FLAGS: this code with FLAGS.")
    parser.add_argument("--example", action="store_true", help="Time NVIDIA's example code too.")
    parser.add_argument("--max-ratio", type=float, default=1.0)
    parser.add_argument("--py-spy", default="", help="NAME,...: profile these contenders in one more run each.")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--smoke-cpu", action="store_true", help="One CPU device: checks the script only.")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="against-") as tmp:
        rows = contenders(args, Path(tmp))
        for row in rows:
            row["runs"] = []
        for p in range(args.passes):
            for row in rows if p % 2 == 0 else rows[::-1]:
                row["runs"].append(run_once(args, row, Path(tmp), p))
                print(f"pass {p} {row['name']}: {row['runs'][-1].get('train_s') or row['runs'][-1]}", flush=True)
        for row in (r for r in rows if args.out and r["name"] in args.py_spy.split(",")):
            row["runs"].append(run_once(args, row, Path(tmp), -1))
    result = summary(rows, args.max_ratio)
    text = table(rows, result)
    print("\n" + text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        for row in rows:
            row["env"] = {k: "(older code)" for k in row["env"]}
        doc = {"argv": sys.argv, "environment": environment(), "table": text, "result": result, "rows": rows}
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")
    failed = any("error" in run for row in rows for run in row["runs"])
    return 1 if failed or not result["pass"] else 0


if __name__ == "__main__":
    sys.exit(main())
