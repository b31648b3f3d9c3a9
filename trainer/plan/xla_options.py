"""--xla-options: XLA's own settings for every program of a task, resolved before JAX starts (stage 1).

XLA reads them from XLA_FLAGS when JAX starts a backend, so they are resolved with the placement
(placement.place) and set in the environment with it (topology.configure_process_env); the values used
are in rank_map.json. `auto` is
GPU_DEFAULTS on GPUs and nothing on CPUs; `none` leaves XLA's own defaults; otherwise space-separated
NAME=VALUE pairs, XLA_FLAGS' names without the dashes, e.g. `xla_gpu_autotune_level=2
xla_gpu_enable_latency_hiding_scheduler=true`. benchmarks/step_levers.py measures the candidates, each
against the trainer's own settings in one run; a winner becomes a default by a line in GPU_DEFAULTS.
--cuda-graphs (XLA's command buffers) stays a setting of its own: it follows where DALI runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from dali_launch.trainer.errors import UsageError

# XLA's own defaults until benchmarks/step_levers.py says otherwise on an H200 (docs/performance.md).
GPU_DEFAULTS: dict[str, str] = {}


def parse(text: str) -> dict[str, str]:
    """`NAME=VALUE NAME=VALUE` (leading dashes allowed) as a dict; ValueError for anything else."""
    options = {}
    for pair in text.split():
        name, sep, value = pair.lstrip("-").partition("=")
        if not sep or not name.startswith("xla_") or not value:
            raise ValueError(pair)
        options[name] = value
    return options


def chosen(setting: str, platform: str) -> dict[str, str]:
    """--xla-options resolved: auto is GPU_DEFAULTS on GPUs, nothing on CPUs; none is nothing."""
    if setting == "auto":
        return dict(GPU_DEFAULTS) if platform == "gpu" else {}
    return {} if setting == "none" else parse(setting)


def typed(options: dict[str, str]) -> dict:
    """The values as jax's `compiler_options` takes them (it reads no 'true'): bools and ints typed."""
    as_bool = {"true": True, "false": False}
    return {k: as_bool.get(v.lower(), int(v) if v.lstrip("-").isdigit() else v) for k, v in options.items()}


_CHECK = "import sys, json, jax; jax.jit(lambda x: x).lower(1.0).compile(compiler_options=json.loads(sys.argv[1]))"


def check(setting: str) -> None:
    """What the launcher asks before anything starts: a given --xla-options parses, and XLA knows every
    name and value (an unknown one in XLA_FLAGS aborts every rank at start). XLA:CPU compiles one tiny
    program with them, in a child process: the GPU options are the same table of XLA's (DebugOptions)."""
    if setting in ("auto", "none"):
        return
    try:
        options = parse(setting)
    except ValueError as e:
        raise UsageError(
            f"--xla-options: {e} is no NAME=VALUE pair of XLA's; give space-separated pairs like "
            f"xla_gpu_autotune_level=2, or auto, or none"
        ) from None
    argv = [sys.executable, "-c", _CHECK, json.dumps(typed(options))]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    if proc.returncode:
        lines = proc.stderr.strip().splitlines() or ["no reason given"]
        said = next((line for line in reversed(lines) if "INVALID_ARGUMENT: " in line), lines[-1])
        raise UsageError(f"--xla-options {setting}: XLA refuses it ({said.split('INVALID_ARGUMENT: ')[-1]}); fix it")
