#!/usr/bin/env python3
"""DALI's video reader decoding clips on the GPU (NVDEC, `device="gpu"`) against the CPU (FFmpeg, `device="cpu"`).

    python benchmarks/video_decode.py --out video_decode.json          # bash benchmarks/gpu.sh video
    python benchmarks/video_decode.py --smoke-cpu                       # the CPU part on a tiny set: the paths only

It writes one `data synth --format video` set (VP9 clips, kept under --data-root), then reads its training split
with `fn.experimental.readers.video` as `--pipeline video` does (one sequence a clip, as its one window a clip no
longer than a window; sharded and padded, batch --batch) on each device asked, a warm-up epoch then --epochs timed
ones: clips/s and frames/s of decoding alone, and GPU / CPU.
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
SIZES = {"train": 2048, "scale": 4.0}  # frames of 256×256 (synth_clips.SIDE × 4)
SMOKE_SIZES = {"train": 24, "scale": 0.25}


def synth(root: Path, smoke: bool) -> Path:
    sizes = SMOKE_SIZES if smoke else SIZES
    out = root / f"video-{sizes['train']}-{sizes['scale']}"
    if not (out / "training").is_dir():
        argv = [*CLI, "data", "synth", str(out), "--format", "video", "--classes", "6", "--train", str(sizes["train"])]
        argv += ["--test", "6", "--image-scale", str(sizes["scale"])]
        subprocess.run(argv, check=True, timeout=900, stdin=subprocess.DEVNULL, capture_output=True)
    return out / "training"


def decode(split: Path, device: str, batch: int, epochs: int, threads: int) -> dict:
    """Clips and frames a second that the reader decodes on `device`, over `epochs` after a warm-up one."""
    import numpy as np
    from nvidia.dali import fn, pipeline_def

    from dali_launch.launcher.data.synth_clips import FRAMES
    from dali_launch.trainer.data.records import videos

    kwargs = videos.reader_kwargs({"file_root": str(split)})

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if device == "gpu" else None, seed=0)
    def reading():
        frames, labels = fn.experimental.readers.video(
            device=device, **kwargs, sequence_length=FRAMES, step=1 << 30, pad_last_batch=True, name="video"
        )
        return frames, labels

    pipe = reading()
    pipe.build()
    calls = -(-pipe.epoch_size("video") // batch)
    for _ in range(calls):  # the warm-up epoch: decoders made, files in the page cache
        pipe.run()
    began = time.perf_counter()
    for _ in range(epochs * calls):
        frames, _ = pipe.run()
    last = frames.as_cpu() if device == "gpu" else frames
    seconds = time.perf_counter() - began
    clips = epochs * calls * batch
    shape = list(np.asarray(last[0]).shape)
    return {"device": device, "clips_per_s": clips / seconds, "frames_per_s": clips * FRAMES / seconds, "clip": shape}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", default="gpu,cpu")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--data-root", type=Path, default=Path(tempfile.gettempdir()) / "dali-launch-video-data")
    p.add_argument("--out", type=Path)
    p.add_argument("--smoke-cpu", action="store_true")
    args = p.parse_args(argv)
    devices = ["cpu"] if args.smoke_cpu else args.devices.split(",")
    split = synth(args.data_root, args.smoke_cpu)
    rows = [decode(split, device, args.batch, args.epochs, args.threads) for device in devices]
    found = {r["device"]: r for r in rows}
    doc = {"argv": sys.argv, "rows": rows}
    if {"gpu", "cpu"} <= found.keys():
        doc["gpu_over_cpu"] = found["gpu"]["clips_per_s"] / found["cpu"]["clips_per_s"]
    print(json.dumps(doc), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
