"""--init-from, checked before anything is written: the checkpoint's variables against the model's.

Comparing shapes needs JAX (the model's, through `jax.eval_shape`) and Orbax (the checkpoint's), which
this process must not import: under `dali-launch train` it becomes the task, whose environment is set
before JAX's first import. So a child does it on the CPU (trainer/model/init_from.py's `main`), in a
few seconds. It needs the pipeline's sample shape, known for the built-in pipelines (task_check.py's); a
pipeline of one's own, and a model the Python API sent by value (the child has no run directory to read it
from), are checked by the task at its start, the same way, before its first step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dali_launch.launcher.route.task_check import sample_shape
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.config import TaskSpec, settings_of
from dali_launch.trainer.entry_points import BY_VALUE
from dali_launch.trainer.errors import UsageError

TIMEOUT_S = 300
MARK = "init-from: "  # the child's refusal, told apart from whatever else JAX and Orbax print


def check(run: RunConfig, data_dir: Path) -> None:
    """After the data's own checks: the sample shape the built-in pipelines give follows from it."""
    shape = sample_shape(run, data_dir) if run.model.init_from is not None and not run.launch.resume else None
    if shape is None or run.model.model.startswith(f"{BY_VALUE}:"):
        return
    spec = TaskSpec(run_dir="", **settings_of(run))
    request = json.dumps({"spec": spec.to_json(), "sample_shape": shape})
    argv = [sys.executable, "-m", "dali_launch.trainer.model.init_from"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    try:
        proc = subprocess.run(argv, input=request, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"--init-from {run.model.init_from}: reading its checkpoint took over {TIMEOUT_S} s; check its storage"
        ) from None
    refusals = [line[len(MARK) :] for line in proc.stderr.splitlines() if line.startswith(MARK)]
    if refusals:
        raise UsageError(refusals[-1])
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--init-from {run.model.init_from}: its checkpoint could not be read ({last})")
