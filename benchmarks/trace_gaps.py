#!/usr/bin/env python3
"""Where the GPU idled in a `--profile-steps` trace, and what the training loop was doing then.

Reads the Perfetto/Chrome trace JAX writes (RUN_DIR/tensorboard/rank-N/plugins/profile/*/*.trace.json.gz),
takes the GPU stream that was busiest (XLA's compute stream), and prints how busy it was, its gaps
longer than --min-gap-ms, and for each the innermost calls the host's busiest thread was in:

    python benchmarks/trace_gaps.py RUN_DIR/tensorboard/rank-0/plugins/profile/*/*.trace.json.gz
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json


def load(path: str) -> tuple[list[dict], dict, dict]:
    """The complete events, and the names of processes and threads."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {"process_name": {}, "thread_name": {}}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in names:
            key = e["pid"] if e["name"] == "process_name" else (e["pid"], e["tid"])
            names[e["name"]][key] = e["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    return spans, names["process_name"], names["thread_name"]


def busiest(spans: list[dict], where) -> list[dict]:
    """The events of the thread (or stream) with the most busy time among those `where` accepts."""
    threads = collections.defaultdict(list)
    for e in spans:
        if where(e):
            threads[(e["pid"], e["tid"])].append(e)
    return sorted(max(threads.values(), key=lambda es: sum(e["dur"] for e in es)), key=lambda e: e["ts"])


def gpu_stream(spans: list[dict], processes: dict, path: str) -> list[dict]:
    """The busiest GPU stream's events (XLA's compute stream); ValueError for a trace without one."""
    if not any("GPU" in name for name in processes.values()):
        raise ValueError(f"{path} holds no GPU stream (a run on CPU devices?); profile a GPU run")
    return busiest(spans, lambda e: "GPU" in processes.get(e["pid"], ""))


def gaps(stream: list[dict], longer_than_us: float) -> tuple[float, list[tuple[float, float]]]:
    """The stream's busy time and its idle intervals longer than `longer_than_us`."""
    busy, found, end = 0.0, [], stream[0]["ts"]
    for e in stream:
        if e["ts"] - end > longer_than_us:
            found.append((end, e["ts"]))
        busy += max(0.0, e["ts"] + e["dur"] - max(e["ts"], end))
        end = max(end, e["ts"] + e["dur"])
    return busy, found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--min-gap-ms", type=float, default=0.3)
    parser.add_argument("--show", type=int, default=20, help="Gaps listed, the longest first.")
    args = parser.parse_args(argv)
    spans, processes, threads = load(args.trace)
    try:
        stream = gpu_stream(spans, processes, args.trace)
    except ValueError as e:
        parser.error(str(e))
    host = busiest(spans, lambda e: "GPU" not in processes.get(e["pid"], ""))
    span = stream[-1]["ts"] + stream[-1]["dur"] - stream[0]["ts"]
    busy, idle = gaps(stream, args.min_gap_ms * 1e3)
    name = threads.get((stream[0]["pid"], stream[0]["tid"]), stream[0]["tid"])
    print(f"{name}: {len(stream)} events over {span / 1e3:.1f} ms, busy {busy / 1e3:.1f} ms ({busy / span:.1%})")
    total = sum(b - a for a, b in idle)
    print(f"gaps over {args.min_gap_ms} ms: {len(idle)}, {total / 1e3:.1f} ms together ({total / span:.1%})")
    for a, b in sorted(idle, key=lambda g: g[0] - g[1])[: args.show]:
        inside = sorted((e for e in host if e["ts"] <= (a + b) / 2 <= e["ts"] + e["dur"]), key=lambda e: -e["dur"])
        where = " > ".join(e["name"][:60] for e in inside[-4:]) or "-"
        print(f"  {(b - a) / 1e3:7.2f} ms at {(a - stream[0]['ts']) / 1e3:8.1f} ms: host in {where}")


if __name__ == "__main__":
    main()
