"""--deterministic: the same run gives the same bits twice on GPUs, and a resumed run those of one never
interrupted (on the same GPUs and layout).

What varies without it, and what it sets (before JAX starts: topology.configure_process_env):
- XLA's GPU kernels: reductions and scatters that add in the order their threads finish (atomics), and
  convolution and GEMM algorithms that are not deterministic. `--xla_gpu_exclude_nondeterministic_ops`
  leaves both out of every program. Autotuning, which picks among the deterministic kernels by timing
  them at each compile, stays on: its picks are kept in the run root (compile_cache.autotune_folder, on
  for every GPU run), so every compile of the root's runs picks the same kernels. With --compile-cache off
  there is no such folder, and `--xla_gpu_deterministic_ops` is set instead: it also turns autotuning off,
  so any two compiles agree, at -28 % for ResNet-50 bf16 on one H200 (4,652-4,700 images/s against
  6,505-6,537). benchmarks/deterministic.py measures both, with the kill -9 + --resume check.
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

GPU_XLA_FLAGS = (("xla_gpu_exclude_nondeterministic_ops", "true"),)  # autotuning kept: its picks kept too
NO_AUTOTUNE_FLAGS = (("xla_gpu_deterministic_ops", "true"),)  # where no picks are kept: autotuning off too
PYTHON_OPERATORS = ("PythonFunction", "TorchPythonFunction", "DLTensorPythonFunction")


def xla_flags(deterministic: bool, platform: str, picks_kept: bool = True) -> tuple[tuple[str, str], ...]:
    """The XLA flags --deterministic sets on `platform` (gpu or cpu): none on CPUs, which need none.
    `picks_kept`: whether the run root keeps XLA's autotuning picks (compile_cache.autotune_folder)."""
    if not deterministic or platform != "gpu":
        return ()
    return GPU_XLA_FLAGS if picks_kept else NO_AUTOTUNE_FLAGS


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
