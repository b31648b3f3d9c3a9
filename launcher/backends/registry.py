"""The backends by name, and the job handle of any run directory.

The name is what a run's config.json records (TaskSpec reads an older directory's `none` as `train`),
so `--resume` continues a run in the mode it started in. Modules are imported when asked for: `--help`
and `dali-launch runs` need none of submitit.
"""

from __future__ import annotations

from dali_launch.launcher.backends.base import Backend
from dali_launch.launcher.backends.job import Job, LocalJob, read_record
from dali_launch.trainer.run_dir import RunPaths


def kind(name: str) -> type[Backend]:
    """The backend class of mode `name` (its class attributes say how it started runs)."""
    if name == "train":
        from dali_launch.launcher.backends.train import Train

        return Train
    if name == "local":
        from dali_launch.launcher.backends.local import Local

        return Local
    if name == "slurm":
        from dali_launch.launcher.backends.slurm import Slurm

        return Slurm
    if name == "allocation":
        from dali_launch.launcher.backends.allocation import Allocation

        return Allocation
    raise ValueError(f"no backend {name!r}")


def create(name: str) -> Backend:
    return kind(name)()


def attach(paths: RunPaths) -> Job:
    """The job of any run directory: its SLURM job once it was submitted (job.json), else its processes
    here (`train`, --local, a task of the user's srun step, which all log into the run directory)."""
    if read_record(paths) is not None:
        return create("slurm").attach(paths)
    return LocalJob(paths)
