#!/usr/bin/env python3
"""The GPU time of XLA's ops, by kind, in one or more JAX profiles, side by side: which kernels a lever
(`step_levers.py --trace`) or a flag makes slower.

An op's kind is its HLO name without the number (`cudnn-conv-bw-filter.73` -> `cudnn-conv-bw-filter`),
taken from the kernel's `hlo_op` (the kernel's own name where a trace has none); its time is the sum of
its kernels' on the busiest GPU stream, per step when --steps says how many steps the trace holds:

    python benchmarks/kernel_time.py TRACE_DIR/baseline TRACE_DIR/deterministic --steps 10
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

from trace_gaps import gpu_stream, load

NUMBERS = re.compile(r"([._]\d+)+$")  # fusion.12, loop_add_fusion_4, a.1.2


def kind(event: dict) -> str:
    return NUMBERS.sub("", (event.get("args") or {}).get("hlo_op") or event["name"])


def times(path: Path) -> dict[str, float]:
    """Microseconds per op kind on the busiest GPU stream of the trace at `path` (a file, or a folder
    holding one *.trace.json.gz, as jax.profiler.trace writes it)."""
    found = [path] if path.is_file() else sorted(path.rglob("*.trace.json*"))
    if not found:
        raise ValueError(f"no *.trace.json.gz in {path}; profile a run into it first")
    spans, processes, _ = load(str(found[-1]))
    totals: dict[str, float] = collections.defaultdict(float)
    for e in gpu_stream(spans, processes, str(found[-1])):
        totals[kind(e)] += e["dur"]
    return totals


def table(columns: dict[str, dict[str, float]], steps: int, top: int) -> str:
    names = list(columns)
    first = columns[names[0]]
    every = set().union(*columns.values())
    spread = lambda k: max(c.get(k, 0.0) for c in columns.values()) - min(c.get(k, 0.0) for c in columns.values())
    rows = sorted(every, key=lambda k: (-spread(k), -first.get(k, 0.0)))[:top]
    unit = "ms/step" if steps > 1 else "ms"
    head = f"{'op kind (' + unit + ')':<40}" + "".join(f"{n[-14:]:>15}" for n in names) + f"{'spread':>10}"
    lines = [head, "-" * len(head)]
    for k in [*rows, "all"]:
        got = [sum(c.values()) if k == "all" else c.get(k, 0.0) for c in columns.values()]
        shown = "".join(f"{v / 1e3 / steps:>15.3f}" for v in got)
        lines.append(f"{k[:39]:<40}{shown}{(max(got) - min(got)) / 1e3 / steps:>10.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path, help="Trace files or folders; the first is the reference.")
    parser.add_argument("--steps", type=int, default=1, help="Steps each trace holds (times are then per step).")
    parser.add_argument("--top", type=int, default=15, help="Op kinds shown, those that differ most first.")
    args = parser.parse_args(argv)
    try:
        columns = {path.name: times(path) for path in args.traces}
    except ValueError as e:
        parser.error(str(e))
    print(table(columns, args.steps, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
