"""Memory for --decoded-cache auto: how large the decoded training split is, and where it may be kept.

Measured once per task, before anything is built (plan/data.py decides from these numbers):
- the decoded split: its sample count and the decoded size of a sample of its images, read from their
  headers (images.py) through the record sources of records/ (no decoding), times 3 channels: an upper
  bound for RGB output, and 3x the grey images MNIST decodes;
- host memory: a quarter of what the kernel says is available (or the cgroup allows: SLURM's --mem),
  shared by the processes of the host; the rest is for the page cache, DALI's buffers and JAX;
- GPU memory: what XLA leaves outside the pool it preallocates (XLA_PYTHON_CLIENT_MEM_FRACTION, 0.75 by
  default: 35 GiB of an H200's 141), less DALI_RESERVE_MB for nvJPEG's buffers and DALI's batches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.data.images import image_size

HOST_SHARE = 0.25
DALI_RESERVE_MB = 8192  # nvJPEG's per-thread buffers (8 x 211 MB, contract.NVJPEG_PADDING), prefetched batches
XLA_FRACTION = 0.75  # JAX's default XLA_PYTHON_CLIENT_MEM_FRACTION
SAMPLED = 64  # images whose headers are read, evenly spaced: an estimate, not every header (ImageNet: 1.28 M files)
CHANNELS = 3
MB = 1 << 20


@dataclass(frozen=True)
class Room:
    """What --decoded-cache auto weighs (MiB): the whole decoded training split, and the memory it may use."""

    split_mb: float | None = None  # None: not measured (off, a global order) or a format records/ does not know
    host_mb: int = 0  # host memory this process may fill
    device_mb: int = 0  # GPU memory per device outside XLA's pool, less DALI's own (0: CPU devices)
    samples: int | None = None  # the training split's, counted with it (GPUs: the plan weighs an epoch's padding)

    def shared(self, share: float) -> Room:
        """The room as one part of the job sees it: `share` of the decoded split (this process's shards, or a
        device's), the memory it may use unchanged."""
        split = None if self.split_mb is None else self.split_mb * share
        return Room(split, self.host_mb, self.device_mb, self.samples)


def measure(spec, devices: list, processes_here: int) -> Room:
    """The room for the spec's training split on this process's `devices`; nothing measured where no cache
    can be (--decoded-cache off, --sample-order global), but on GPUs the split's samples counted all the same."""
    gpu, cache = devices[0].platform == "gpu", spec.data.decoded_cache.strip().lower() != "off"
    cache = cache and spec.data.sample_order != "global"
    if not (cache or gpu):
        return Room()
    source = _source(Path(spec.data.data_dir) / "training")  # listed once: ImageNet's folders take seconds
    samples = None if source is None else len(source)
    if not cache:
        return Room(samples=samples)
    return Room(decoded_mb(source), host_room_mb(processes_here), device_room_mb(devices[0]) if gpu else 0, samples)


def decoded_split_mb(split: Path) -> float | None:
    """The decoded size of every training image of `split`, estimated from SAMPLED of them; None if unknown."""
    return decoded_mb(_source(split))


def _source(split: Path):
    """The records of a split in a format records/ reads (None for another)."""
    from dali_launch.trainer.data import records  # numpy and the readers of every format

    return records.source_of(split)


def decoded_mb(source) -> float | None:
    """The decoded size of every image of a record source, estimated from SAMPLED of them; None if unknown."""
    if source is None or not len(source):
        return None
    n = len(source)
    picked = sorted({i * n // SAMPLED for i in range(min(n, SAMPLED))})
    try:
        sizes = [_pixels(bytes(source.read(i)[0])) for i in picked]
    except (OSError, ValueError):  # the data checks say what is wrong with an image; here it is just unknown
        return None
    return n * CHANNELS * sum(sizes) / len(sizes) / MB


def _pixels(encoded: bytes) -> int:
    height, width = image_size(encoded)
    return height * width


def host_room_mb(processes_here: int) -> int:
    """HOST_SHARE of the host memory available now (or the cgroup's limit, if lower), per process."""
    available = _meminfo_kb("MemAvailable") * 1024
    limit = _cgroup_limit()
    if limit is not None:
        available = min(available, limit)
    return int(available * HOST_SHARE / max(1, processes_here) / MB)


def device_room_mb(device) -> int:
    """GPU memory outside XLA's pool, less DALI_RESERVE_MB (0 where the device does not say)."""
    stats = device.memory_stats() or {}
    pool = stats.get("bytes_limit")
    if not pool:
        return 0
    fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", XLA_FRACTION))
    outside = pool * (1 - fraction) / fraction
    return max(0, int(outside / MB) - DALI_RESERVE_MB)


def _meminfo_kb(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def _cgroup_limit() -> int | None:
    """cgroup v2's memory.max for this process (SLURM's --mem), or None when unlimited or unknown."""
    try:
        group = Path("/proc/self/cgroup").read_text().strip().split("::", 1)[1]
        value = (Path("/sys/fs/cgroup") / group.lstrip("/") / "memory.max").read_text().strip()
    except (OSError, IndexError):
        return None
    return None if value == "max" else int(value)
