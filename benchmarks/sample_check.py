#!/usr/bin/env python3
"""What the pre-flight check of a class-folders split costs (trainer/data/bad_samples.py), on a model of an
ImageNet-sized listing: N hard links to one ImageNet-sized JPEG (~110 KB, `data synth`'s) in 1,000 class
folders, on the folder given (a tmpfs: the page cache is warm, as after a first epoch; a cold network file
system pays its own latency per file on top). It times, per file and extrapolated to 1.28 M files:

    check      the first run: listing, fingerprint (a stat per file), two reads per file (head and tail)
    cached     a second run on the same files: the listing and fingerprint only (what a requeue pays)

    python benchmarks/sample_check.py --files 100000 --dir /dev/shm/check --out check.json
    python benchmarks/sample_check.py --files 1281167 --dir /dev/shm/check   # the real count: ~2 GB of RAM
    python benchmarks/sample_check.py --smoke-cpu --out /tmp/check.json      # 300 files, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

IMAGENET_FILES = 1_281_167
CLASSES = 1000


def make_listing(root: Path, files: int) -> Path:
    """`files` hard links to one JPEG, spread over CLASSES class folders of root/training."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dali_launch.launcher.data import synth_images

    split = root / "training"
    jpeg = root / "image.jpg"
    jpeg.write_bytes(synth_images.jpeg(0, "training", 0, 0, 1.0))
    classes = min(CLASSES, files)
    for c in range(classes):
        (split / f"{c:04d}").mkdir(parents=True)
    for i in range(files):
        os.link(jpeg, split / f"{i % classes:04d}" / f"{i:08d}.jpg")
    return split


def timed_scan(split: Path) -> float:
    from dali_launch.trainer.data import sample_scan

    start = time.perf_counter()
    scan = sample_scan.scan_split("file", {"file_root": str(split)})
    assert not scan.bad, scan.bad[:3]
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--dir", default="", help="Where the listing is made (a tmpfs); default a temporary folder.")
    parser.add_argument("--smoke-cpu", action="store_true", help="300 files: the test suite's run.")
    parser.add_argument("--out", default="", help="Write the numbers as JSON here.")
    args = parser.parse_args()
    files = 300 if args.smoke_cpu else args.files
    root = Path(args.dir or tempfile.mkdtemp(prefix="sample-check-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ["DALI_LAUNCH_CACHE"] = str(root / "cache")  # a cold cache of our own
    try:
        made = time.perf_counter()
        split = make_listing(root, files)
        made = time.perf_counter() - made
        check, cached = timed_scan(split), timed_scan(split)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    per_file = {"check_us": 1e6 * check / files, "cached_us": 1e6 * cached / files}
    result = {
        "files": files,
        "cores": os.cpu_count(),
        "listing_made_s": round(made, 2),
        "check_s": round(check, 3),
        "cached_s": round(cached, 3),
        **{k: round(v, 2) for k, v in per_file.items()},
        "imagenet_check_s": round(per_file["check_us"] * IMAGENET_FILES / 1e6, 1),
        "imagenet_cached_s": round(per_file["cached_us"] * IMAGENET_FILES / 1e6, 1),
    }
    print(
        f"{files:,} files on {os.cpu_count()} cores: check {check:.2f} s ({per_file['check_us']:.1f} µs a file), "
        f"cached {cached:.2f} s ({per_file['cached_us']:.1f} µs); for ImageNet's {IMAGENET_FILES:,}: "
        f"check {result['imagenet_check_s']} s, cached {result['imagenet_cached_s']} s"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
