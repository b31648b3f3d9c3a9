"""The per-user cache both halves share: the embedded data set, codec links (XLA's programs: compile_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$DALI_LAUNCH_CACHE, else ~/.cache/dali-launch."""
    return Path(os.environ.get("DALI_LAUNCH_CACHE", Path.home() / ".cache" / "dali-launch"))
