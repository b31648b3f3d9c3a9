#!/usr/bin/env python3
"""Launch -> first training step, cold and warm, as a user launches (`dali-launch --local`).

Runs the same command --runs times in one fresh run root: the first compiles everything (an empty
RUN_ROOT/.compile-cache: cold), the later ones find every program there (warm). Local mode knows the
launch time, so each run's metrics.jsonl holds launch -> first step done (`first_step_s`) and when
each start-up phase ended; the table gives both, with the first evaluation's time (compiled during
epoch 0: trainer/step/evaluate.py's prepare).

On the GPU machine, the MNIST MLP with no flags (about 40 s):

    python benchmarks/startup.py --data /tmp/fmnist --out benchmarks/results/startup/h200.json

`--smoke-cpu` runs it on one CPU device (the numbers mean nothing); `--extra` adds flags to each run.
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

from report import checksums, environment

CLI = [sys.executable, "-m", "dali_launch.launcher.cli"]
TIMEOUT_S = 600


def launch(args, run_root: Path) -> dict:
    """One run, its first epoch's start-up figures."""
    argv = [*CLI, "--local", "--processes", "1", "--gpus-per-node", "1", "--epochs", str(args.epochs)]
    argv += ["--platform", "cpu" if args.smoke_cpu else "gpu", "--run-root", str(run_root), *args.extra.split()]
    argv += ["--data-dir", str(args.data)] if args.data else []
    env = {**os.environ, "DALI_LAUNCH_COMPILE_CACHE": ""}  # the default: the run root's cache, cold at first
    began = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, env=env)
    wall_s = time.perf_counter() - began
    runs = sorted(p for p in run_root.iterdir() if (p / "metrics.jsonl").is_file())
    if proc.returncode or not runs:
        return {"argv": argv[len(CLI) :], "error": (proc.stderr or proc.stdout).strip().splitlines()[-6:]}
    first = json.loads((runs[-1] / "metrics.jsonl").read_text().splitlines()[0])
    ranks = json.loads((runs[-1] / "rank_map.json").read_text())
    return {
        "checksums": checksums(runs[-1]),  # runs of one run root share its programs: the same bits
        "compile_s": first["compile_s"],
        "argv": argv[len(CLI) :],
        "wall_s": wall_s,
        "first_step_s": first["first_step_s"],
        "startup": first["startup"],
        "first_eval_s": first["eval_time_s"],
        "epoch_s": first["epoch_time_s"],
        "first_call_compiled": ranks[0]["resolved"]["first_call_compiled"],  # ahead, or again on the first batch
    }


def table(rows: list[dict]) -> str:
    head = f"{'run':<6}{'first step s':>13}{'1st call s':>11}{'eval 0 s':>10}{'wall s':>8}  phases (s since launch, when each ended)"
    lines = [head, "-" * len(head)]
    for i, r in enumerate(rows):
        name = "cold" if i == 0 else "warm"
        if "error" in r:
            lines.append(f"{name:<6}failed: {r['error']}")
            continue
        phases = ", ".join(f"{k} {v:.1f}" for k, v in r["startup"].items())
        lines.append(
            f"{name:<6}{r['first_step_s']:>13.2f}{r['compile_s']:>11.2f}{r['first_eval_s']:>10.2f}{r['wall_s']:>8.1f}  {phases}"
        )
    compiled = {r["first_call_compiled"] for r in rows if "error" not in r}
    lines.append(f"first device call compiled: {', '.join(sorted(compiled))}")
    sums = {str(r.get("checksums")) for r in rows if "error" not in r}
    lines.append(f"parameters alike in every run: {len(sums) == 1}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="--data-dir of the runs (default: the embedded MNIST sample).")
    parser.add_argument("--runs", type=int, default=2, help="Runs in one run root: the first cold, the rest warm.")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--extra", default="", help="More flags for every run, e.g. '--model resnet50 ...'.")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU devices: checks the script only.")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as root:
        for _ in range(args.runs):
            rows.append(launch(args, Path(root)))
            print(table(rows).splitlines()[-1], flush=True)
    text = table(rows)
    print("\n" + text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"argv": sys.argv, "environment": environment(), "table": text, "rows": rows}  # JAX here: after the runs
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
