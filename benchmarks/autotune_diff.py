#!/usr/bin/env python3
"""Which kernels --deterministic makes slower: XLA's autotuning picks of two runs compared kernel by kernel.

Every GPU run keeps XLA's autotuning picks in its compile cache's `autotune/` folder (trainer/compile_cache.py),
one text file per autotuned kernel (a GEMM, a convolution or a Triton fusion), holding the instruction, the
candidate chosen and its measured run time. Two runs of one model, one with the defaults and one with
--deterministic (XLA's nondeterministic kernels excluded), autotune the same instructions: the files they share
say, for each one, what the exclusion cost. Run on the GPU machine after the two runs:

    python benchmarks/autotune_diff.py DEFAULT_CACHE/autotune DETERMINISTIC_CACHE/autotune --out diff.json

It prints the total of the chosen kernels' run times per kind in each, and the kernels whose time grew most.
(A kernel's run time once; how often a step runs it is not in the files.)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

NANOS = re.compile(r"run_time\s*\{[^}]*?nanos:\s*(\d+)")
SECONDS = re.compile(r"run_time\s*\{[^}]*?seconds:\s*(\d+)")
KINDS = ("conv", "gemm", "triton", "cuda_conv", "custom_kernel_fusion", "algorithm")
TARGET = re.compile(r'custom_call_target=\\?"([^"\\]+)')


def read(path: Path) -> dict:
    """One picks file: its chosen kernel's run time (ns), the kind of pick, and what the instruction is."""
    text = path.read_text(errors="replace")
    nanos = sum(int(n) for n in NANOS.findall(text)[:1]) + sum(int(s) * 10**9 for s in SECONDS.findall(text)[:1])
    kind = next((k for k in KINDS if re.search(rf"\b{k}\s*\{{", text)), "other")
    target = TARGET.search(text)
    return {"ns": nanos, "kind": kind, "what": target.group(1) if target else kind}


def table(folder: Path) -> dict[str, dict]:
    return {p.name: read(p) for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}


def compare(base: dict, other: dict, top: int) -> dict:
    shared = sorted(set(base) & set(other))
    kinds: dict[str, list[int]] = {}
    for name in shared:
        row = kinds.setdefault(f"{base[name]['kind']}:{base[name]['what']}", [0, 0, 0])
        row[0] += 1
        row[1] += base[name]["ns"]
        row[2] += other[name]["ns"]
    grown = sorted(shared, key=lambda n: other[n]["ns"] - base[n]["ns"], reverse=True)[:top]
    return {
        "files": {"base": len(base), "other": len(other), "shared": len(shared)},
        "by_kind": {k: {"kernels": c, "base_ns": b, "other_ns": o} for k, (c, b, o) in kinds.items()},
        "grown": [{"file": n, **base[n], "other_ns": other[n]["ns"]} for n in grown],
        "only_base_ns": sum(base[n]["ns"] for n in set(base) - set(other)),
        "only_other_ns": sum(other[n]["ns"] for n in set(other) - set(base)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="The defaults' autotune/ folder.")
    parser.add_argument("other", type=Path, help="The --deterministic run's autotune/ folder.")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = compare(table(args.base), table(args.other), args.top)
    print(json.dumps(result["files"]))
    print(f"{'kind:what':<48}{'kernels':>8}{'base ms':>10}{'other ms':>10}")
    for kind, row in sorted(result["by_kind"].items(), key=lambda kv: -kv[1]["other_ns"]):
        print(f"{kind[:47]:<48}{row['kernels']:>8}{row['base_ns'] / 1e6:>10.3f}{row['other_ns'] / 1e6:>10.3f}")
    print(f"only in base: {result['only_base_ns'] / 1e6:.3f} ms; only in other: {result['only_other_ns'] / 1e6:.3f} ms")
    for row in result["grown"]:
        print(f"  {row['what'][:40]:<40} {row['ns'] / 1e3:>9.1f} us -> {row['other_ns'] / 1e3:>9.1f} us  {row['file']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
