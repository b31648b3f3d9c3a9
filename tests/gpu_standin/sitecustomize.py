"""The GPU stand-in (gpu_outputs.py) in every process of a run: with this folder on PYTHONPATH, each launcher,
rank and DALI worker loads this file as its interpreter starts (local mode and SLURM alike), and the stand-in
takes over as DALI's pipeline module and the trainer's dali_outputs load, so a process that loads neither pays
nothing. Like benchmarks/fs_probe/sitecustomize.py, it acts once a module has run.
"""

from __future__ import annotations

import atexit
import importlib.abc
import sys

import gpu_outputs  # beside this file, on PYTHONPATH as it is


def _pipeline(module) -> None:
    module.Pipeline.run = gpu_outputs.wrapped_run(module.Pipeline.run)


AFTER = {"nvidia.dali.pipeline": _pipeline, "dali_launch.trainer.data.dali_outputs": gpu_outputs.extend}


class _After(importlib.abc.MetaPathFinder):
    """Runs AFTER[name] on a module once it has run."""

    def find_spec(self, name, path, target=None):
        if name not in AFTER:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            AFTER[name](module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _After())
atexit.register(gpu_outputs.write_counts)
