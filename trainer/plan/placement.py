"""Where DALI runs, decided from the spec before DALI or JAX start, and what follows from it: the plan's first
step, the one the process environment must hear before anything starts (topology.configure_process_env).

--decoder picks it: `cpu` runs each pipeline wholly on the CPU (device_id=None) and JAX copies its
batches to the device; `mixed` decodes with nvJPEG and keeps the pipeline on the GPU. Measured on an
H200 node (benchmarks/components.py, README), a CPU pipeline pays for the GPU only if nvImageCodec
brings its GPU codecs:
- its nvJPEG codec costs ~1.1 s per decoder even when the decoder runs on the CPU, and loads libcuda:
  8 pipelines built in 8.8 s with it, in 0.04 s with the CPU codecs alone, decoding the same pixels;
- with DALI making no CUDA calls at all, nothing else in the process can break XLA's CUDA graph
  captures (one run with GPU pipelines died with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), so XLA may
  run the fused steps as CUDA graphs, 2.5x faster there.
data/codecs.py keeps such a pipeline's codecs to the CPU ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dali_launch.trainer import compile_cache, determinism, jax_private
from dali_launch.trainer.config import DataConfig, TaskSpec
from dali_launch.trainer.data.contract import auto_decoder
from dali_launch.trainer.entries import Entries
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan.xla_options import chosen


@dataclass(frozen=True)
class Placement:
    """Where DALI runs and what follows from it, decided once, before JAX starts: what the process
    environment must say before JAX or DALI start (topology.configure_process_env), XLA's options with it."""

    platform: str  # gpu or cpu
    decoder: str  # cpu or mixed
    cuda_graphs: bool  # XLA may run programs as CUDA graphs (GPUs only)
    xla_options: dict = field(default_factory=dict)  # --xla-options resolved (plan/xla_options.py)
    xla_flags: tuple[tuple[str, str], ...] = ()  # --deterministic's (determinism.py), the autotuning folder's


def place(spec: TaskSpec, platform: str, entries: Entries | None = None) -> Placement:
    """--decoder, --cuda-graphs and --deterministic resolved on this task's platform (gpu or cpu,
    topology.resolve_platform); `entries`: the run's parts (entries.py), whose pipeline --decoder auto asks for its
    word (None: the spec's own)."""
    where = decoder(spec.data, platform, entries or Entries(spec))
    if where == "mixed" and platform != "gpu":
        raise UsageError("--decoder mixed decodes on the GPU, but this run has CPU devices; use --decoder cpu")
    graphs = platform == "gpu" and cuda_graphs(spec.xla.cuda_graphs, where == "mixed")
    options = chosen(spec.xla.xla_options, platform)
    return Placement(platform, where, graphs, options, xla_flags(spec, platform))


def xla_flags(spec: TaskSpec, platform: str) -> tuple[tuple[str, str], ...]:
    """XLA's flags set before JAX starts: on GPUs the run root's autotuning folder (compile_cache.py) and
    --deterministic's kernels (determinism.py)."""
    picks = compile_cache.autotune_folder(spec) if platform == "gpu" else None
    kept = ((compile_cache.AUTOTUNE_FLAG, str(picks)),) if picks else ()
    return kept + determinism.xla_flags(spec.xla.deterministic, platform)


def decoder(config: DataConfig, platform: str, entries: Entries) -> str:
    """--decoder resolved to cpu or mixed. `auto` is cpu on CPU devices; on GPUs it is the pipeline's
    own word, a `contract.Pipeline`'s auto_decoder (mnist: cpu, nvJPEG is slower on 28x28 images), else mixed."""
    if config.decoder != "auto":
        return config.decoder
    if platform != "gpu":
        return "cpu"
    return auto_decoder(_loaded_before_jax(config.pipeline, entries))


def _loaded_before_jax(name: str, entries: Entries):
    """--pipeline `name`, loaded for --decoder auto's word before JAX starts. A module that starts JAX itself when
    imported (DALI's JAX tutorials build their sharding from jax.devices()) would start it before XLA's flags and
    jax.distributed.initialize, which fails; one line instead. With --decoder given, the task imports the module
    only after both (plan/data.py)."""
    started = jax_private.backends_started()
    pipeline = entries.pipeline
    if not started and jax_private.backends_started():
        raise UsageError(
            f"--pipeline {name} starts JAX when imported (it asks JAX for its devices), and --decoder auto must "
            f"import it before JAX starts; pass --decoder mixed (or cpu): the task then imports it after JAX starts"
        )
    return pipeline


def cuda_graphs(setting: str, dali_gpu: bool) -> bool:
    """--cuda-graphs resolved: `auto` lets XLA capture CUDA graphs only while DALI stays off the GPU."""
    return setting == "on" or (setting == "auto" and not dali_gpu)
