"""Backends: who starts a run's tasks. One small interface (base.py), one module per mode.

here    this very process (`dali-launch train`)
local   the job's processes on this machine (`--local`)
slurm   a SLURM job through submitit (the default)
allocation  one task of the user's own srun step (`srun dali-launch task`)
"""

from __future__ import annotations

from dali_launch.launcher.backends.base import Backend


def create(name: str) -> Backend:
    """The backend a run's config.json names (`train` is the `here` backend's name on disk)."""
    if name in ("here", "train"):
        from dali_launch.launcher.backends.here import Here

        return Here()
    if name == "local":
        from dali_launch.launcher.backends.local import Local

        return Local()
    if name == "slurm":
        from dali_launch.launcher.backends.slurm import Slurm

        return Slurm()
    if name == "allocation":
        from dali_launch.launcher.backends.allocation import Allocation

        return Allocation()
    raise ValueError(f"no backend {name!r}")
