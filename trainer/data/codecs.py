"""nvImageCodec's codecs for a pipeline that never uses the GPU (plan/placement.py decides which): its CPU codecs
alone. Its nvJPEG codec costs ~1.1 s per decoder even when the decoder runs on the CPU, and loads libcuda: 8
pipelines built in 8.8 s with it, in 0.04 s with the CPU codecs alone, decoding the same pixels.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from dali_launch.trainer.cache import cache_root

CODECS_PATH = "NVIMGCODEC_EXTENSIONS_PATH"  # nvImageCodec's own setting: the folder it loads codecs from
GPU_CODECS = {"libnvjpeg_ext", "libnvjpeg2k_ext", "libnvtiff_ext"}  # nvImageCodec's CUDA codecs


def use_cpu_codecs_only() -> None:
    """Points nvImageCodec at a folder of links to its CPU codecs alone, for pipelines that never use the
    GPU. One folder per codec set in the user's cache, made once and shared by every process: a rank
    that is killed leaves nothing behind. A CODECS_PATH already set is kept."""
    source = _codecs_folder()
    if CODECS_PATH in os.environ or source is None:
        return
    codecs = sorted(c for c in source.iterdir() if c.name.split(".so")[0] not in GPU_CODECS)
    key = hashlib.sha256("\n".join(str(c) for c in codecs).encode()).hexdigest()[:16]
    folder = cache_root() / "nvimgcodec-cpu" / key
    if not folder.is_dir():
        _make_links(folder, codecs)
    os.environ[CODECS_PATH] = str(folder)


def _make_links(folder: Path, codecs: list[Path]) -> None:
    """The folder of links, made beside its place and renamed into it: readers never see half of it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for codec in codecs:
            (tmp / codec.name).symlink_to(codec)
        tmp.rename(folder)
    except OSError:
        if not folder.is_dir():  # not another process's folder that won the race
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _codecs_folder() -> Path | None:
    """nvImageCodec's codec folder (the nvidia-nvimgcodec wheel DALI uses), found without importing it."""
    try:
        spec = importlib.util.find_spec("nvidia.nvimgcodec")
    except ImportError:
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "extensions").is_dir():
            return Path(location) / "extensions"
    return None
