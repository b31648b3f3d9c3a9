"""dali-launch from Python: what a script or a notebook uses, all from here (docs/python-api.md).

    import dali_launch as dl

    executor = dl.Executor("here", epochs=1)                    # "here", "local" or "slurm"; none: from where it runs
    job = executor.submit(model=dl.models["mlp"])               # checked, written, started: the run's handle
    jobs = executor.map_array(learning_rate=[0.05, 0.1, 0.2])   # three runs in one call (SLURM: one job array)
    print(job.result(timeout_s=900)["final"], job.state, job.stdout())

The run's API (launcher/api/): `Executor`, `Job`, `RunFailed`, `RunState`, `UsageError`. For parts of your own:
`Task` and `class_ids` (a task: trainer/tasks/contract.py, docs/tasks.md), `PipelineArgs` and `Pipeline` (a
pipeline: trainer/data/contract.py, docs/data.md). The built-ins by name: `models`, `tasks`, `pipelines`
(launcher/api/builtins.py). Every name is imported when first used (the module's `__getattr__`): `import
dali_launch` imports neither JAX, DALI, Flax nor the launcher, and `dali-launch --help`, whose package this is,
stays instant.
"""

from __future__ import annotations

import importlib

# Each public name -> the module that defines it.
_HOMES = {
    "Executor": "dali_launch.launcher.api.executor",
    "Job": "dali_launch.launcher.api.handle",
    "RunFailed": "dali_launch.launcher.api.handle",
    "RunState": "dali_launch.launcher.backends.job",
    "UsageError": "dali_launch.trainer.errors",
    "Task": "dali_launch.trainer.tasks.contract",
    "class_ids": "dali_launch.trainer.data.contract",
    "PipelineArgs": "dali_launch.trainer.data.contract",
    "Pipeline": "dali_launch.trainer.data.contract",
    "models": "dali_launch.launcher.api.builtins",
    "tasks": "dali_launch.launcher.api.builtins",
    "pipelines": "dali_launch.launcher.api.builtins",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'dali_launch' has no attribute {name!r}; its names are {', '.join(__all__)}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
