"""The Python API: dali-launch's runs from a script or a notebook, in the style of submitit's executors. Users
import it from `dali_launch` (dali_launch/__init__.py), which takes its names from here:

    import dali_launch as dl

    executor = dl.Executor("here")               # or "local" (gpus_per_node=2, processes=2), or "slurm"
    job = executor.submit(model=MyModel, epochs=1)
    job.result(timeout_s=600)                    # result.json; RunFailed with the run's reason otherwise

docs/python-api.md says it all: settings, objects and what must be importable, the handle, several runs in one
call, the modes.
"""

from dali_launch.launcher.api.executor import Executor
from dali_launch.launcher.api.handle import Job, RunFailed
from dali_launch.launcher.backends.job import RunState
from dali_launch.trainer.errors import UsageError

__all__ = ["Executor", "Job", "RunFailed", "RunState", "UsageError"]
