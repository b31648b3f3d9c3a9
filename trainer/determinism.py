"""--deterministic: the same run gives the same bits twice on GPUs, and a resumed run those of one never
interrupted (on the same GPUs and layout).

What varies without it, and what it sets (before JAX starts: topology.configure_process_env):
- XLA's GPU kernels: reductions and scatters that add in the order their threads finish (atomics),
  convolution and GEMM algorithms that are not deterministic, and autotuning, which picks kernels by
  timing them at each compile. `--xla_gpu_deterministic_ops` excludes the first two and turns autotuning
  off, so two compiles of one program agree. On ResNet-50 the price was the excluded kernels, not
  autotuning: `--xla_gpu_exclude_nondeterministic_ops` alone, which keeps autotuning, cost as much. That
  flag's runs also agreed across fresh compiles, but XLA promises it only of this one, and under it XLA
  kept no autotuning picks (the run root's autotune/ folder stayed empty), so nothing would hold two
  compiles to one choice. Nearly all of the price was XLA's deterministic form of one scatter, the stem max
  pool's gradient; plan/step.py's pool_grad gives it without a scatter under this flag, and the flag then
  costs nothing measurable (docs/resilience.md, `--deterministic`; benchmarks/HISTORY.md has the runs).
What holds without anything set:
- XLA on CPUs runs one compiled program the same way each time (docs/resilience.md);
- DALI: readers shuffle and random operators draw from the pipeline's seed per sample, not per thread
  (so --reader-threads changes nothing), and DALI's checkpoints hold those states (that nvJPEG's
  decoders, the hardware one's share included, give the same pixels twice is benchmarks/deterministic.py's
  `data` check);
- the trainer: the order of samples in each step, dropout keys (the step count and the device) and the
  data the checkpoint restores are functions of --seed and the layout.
What it cannot make deterministic, and refuses before any job (`check_pipeline`): a --pipeline of your own
with Python operators (fn.python_function and its kin), which run Python that DALI neither seeds nor
checkpoints.
"""

from __future__ import annotations

from dali_launch.trainer.errors import UsageError

GPU_XLA_FLAGS = (("xla_gpu_deterministic_ops", "true"),)
PYTHON_OPERATORS = ("PythonFunction", "TorchPythonFunction", "DLTensorPythonFunction")


def xla_flags(deterministic: bool, platform: str) -> tuple[tuple[str, str], ...]:
    """The XLA flags --deterministic sets on `platform` (gpu or cpu): none on CPUs, which need none."""
    return GPU_XLA_FLAGS if deterministic and platform == "gpu" else ()


def check_pipeline(name: str, args) -> None:
    """--deterministic with --pipeline `name`: refused (UsageError) when its graph, built for `args`
    (contract.PipelineArgs; built, not run), holds an operator DALI cannot make deterministic."""
    found = python_operators(name, args)
    if found:
        raise UsageError(
            f"--deterministic cannot hold with --pipeline {name}: its {found[0]} operator runs Python that DALI "
            f"neither seeds nor checkpoints; write it with DALI operators, or leave --deterministic out"
        )


def python_operators(name: str, args) -> list[str]:
    """The Python operators (schema names) the pipeline's outputs depend on, found by walking its graph
    from them. A pipeline that cannot be defined here (on the CPU, without its data) shows none: the task
    reports its own error."""
    from dali_launch.trainer.data import graph_check

    outputs = graph_check.define(name, args)
    if not isinstance(outputs, (tuple, list)):
        return []
    return sorted({kind for kind in graph_check.operators(outputs).values() if kind in PYTHON_OPERATORS})
