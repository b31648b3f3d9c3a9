#!/usr/bin/env python3
"""Bad samples with the GPU's decoders (nvJPEG and the hardware JPEG decoder): every case ends
in one line naming the file, never a segfault, never a silent rank death.

A tiny `data synth` folders set (2 classes, 8 + 4 images), spoilt four ways, each trained with
`dali-launch train --platform gpu --decoder mixed --hw-decoder-load 0.9` in a fresh process:

    text        training/1/00000001.jpg is a text file named .jpg        stop: the pre-flight check's line
    truncated   training/0/00000002.jpg is its JPEG cut short by 200 B   stop: the pre-flight check's line
    inside      training/1/00000003.jpg has a garbage Huffman table:     the decoder's own error, named
                its header is sound, so only nvJPEG meets it
    skip        text and truncated with --bad-samples skip               finishes, "2 bad samples left out"

Each case passes when the run ends as said (exit 0 for skip; else exit 1 or 2 with exactly one
`dali-launch: ` line naming the spoilt file, and no signal). It prints one line per case and a verdict,
and writes them as JSON (--out). About 2 minutes on one H200 (four short runs, each compiling a CNN):

    python benchmarks/bad_samples_gpu.py --out benchmarks/results/bad_samples_gpu/h200.json

`--smoke-cpu` runs the two pre-flight cases on CPU (`--platform cpu --decoder cpu`): seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = ["--pipeline", "folders", "--model", "cnn", "--image-size", "32", "--num-classes", "2", "--batch-size", "2"]
CASES = {  # name: (sample spoilt, how, extra flags)
    "text": (1, "text", []),
    "truncated": (2, "truncated", []),
    "inside": (3, "huffman", []),
    "skip": (None, "text+truncated", ["--bad-samples", "skip", "--max-bad-samples", "2"]),
}


def spoil(jpeg: bytes, how: str) -> bytes:
    if how == "text":
        return b"this is not an image\n"
    if how == "truncated":
        return jpeg[:-200]
    data = bytearray(jpeg)  # a garbage Huffman table: markers and sizes stay sound
    at = data.find(b"\xff\xc4")
    length = int.from_bytes(data[at + 2 : at + 4], "big")
    data[at + 5 : at + 2 + length] = b"\xab" * (length - 3)
    return bytes(data)


def make_set(root: Path, case: str) -> tuple[Path, list[Path]]:
    """The case's data set and the files it spoilt."""
    from dali_launch.launcher.data.synth import SynthSpec, synth

    data = root / case
    synth(SynthSpec(data, "folders", 2, 8, 4, image_scale=0.1, shard_size=8, workers=1))
    sample, how, _ = CASES[case]
    spoilt = [(1, "text"), (2, "truncated")] if case == "skip" else [(sample, how)]
    paths = []
    for index, kind in spoilt:
        path = next((data / "training").glob(f"*/{index:08d}.jpg"))
        path.write_bytes(spoil(path.read_bytes(), kind))
        paths.append(path)
    return data, paths


def run_case(root: Path, case: str, platform: list[str], timeout_s: int) -> dict:
    data, spoilt = make_set(root, case)
    argv = [sys.executable, "-m", "dali_launch.launcher.cli", "train", *TRAIN, *platform, *CASES[case][2]]
    argv += ["--epochs", "1", "--data-dir", str(data), "--run-root", str(root / f"runs-{case}")]
    env = {**os.environ, "DALI_LAUNCH_CACHE": str(root / "cache")}
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        code, out, err = None, "", f"ran past {timeout_s} s"
    ours = [line for line in err.splitlines() if line.startswith("dali-launch: ")]
    if case == "skip":
        ok = code == 0 and "2 bad samples left out" in out
    else:
        ok = code in (1, 2) and len(ours) == 1 and str(spoilt[0]) in ours[0]
    return {"case": case, "ok": ok, "exit": code, "line": ours[-1] if ours else "", "stderr_tail": err[-2000:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke-cpu", action="store_true", help="The two pre-flight cases on CPU devices.")
    parser.add_argument("--timeout-s", type=int, default=300, help="Per case.")
    parser.add_argument("--out", default="", help="Write the cases as JSON here.")
    args = parser.parse_args()
    platform = (
        ["--platform", "cpu", "--decoder", "cpu"] if args.smoke_cpu else ["--platform", "gpu", "--decoder", "mixed"]
    )
    platform += [] if args.smoke_cpu else ["--hw-decoder-load", "0.9"]
    cases = ["text", "truncated"] if args.smoke_cpu else list(CASES)
    root = Path(tempfile.mkdtemp(prefix="bad-samples-gpu-"))
    try:
        results = [run_case(root, case, platform, args.timeout_s) for case in cases]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for r in results:
        print(f"{r['case']:10s} {'PASS' if r['ok'] else 'FAIL'}  exit {r['exit']}  {r['line']}")
        if not r["ok"]:
            print("    " + r["stderr_tail"].replace("\n", "\n    "))
    verdict = all(r["ok"] for r in results)
    print(f"verdict: {'every case ended in one line' if verdict else 'FAILED'}")
    if args.out:
        Path(args.out).write_text(json.dumps({"cases": results, "ok": verdict}, indent=2))
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
