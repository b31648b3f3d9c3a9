"""XLA's side: deterministic kernels, CUDA graphs, XLA's options, the compile cache.

The [xla] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class XlaConfig:
    deterministic: bool = opt(
        False,
        "Bit-reproducible GPU runs (XLA's deterministic kernels; slower).",
        details=(
            "Reproducible GPU runs: XLA's deterministic GPU kernels (no atomics in reductions, deterministic "
            "convolutions, no autotuning), so the same run twice, and a resumed run against one never interrupted "
            "(same GPUs and layout), end with the same parameters bit for bit. It costs GPU speed (docs/performance.md); "
            "CPU runs need nothing. Recorded in rank_map.json (docs/resilience.md)."
        ),
        on_resume="may change",
    )
    cuda_graphs: str = opt(
        "auto",
        "XLA's CUDA graphs: on, off, or auto.",
        details=(
            "Let XLA run programs as CUDA graphs (its command buffers: fewer kernel launches): "
            "on, off, or auto: on while DALI runs on the CPU (--decoder), off when it also works on the GPU, whose "
            "CUDA calls can break a graph capture (one run died with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)."
        ),
        choices=("auto", "on", "off"),
        on_resume="may change",
    )
    xla_options: str = opt(
        "auto",
        "XLA_FLAGS for every program: NAME=VALUE ..., auto, or none.",
        details=(
            "XLA's own settings for every program of the task, as XLA_FLAGS names them without dashes: space-separated "
            "NAME=VALUE, e.g. 'xla_gpu_autotune_level=2 xla_gpu_enable_latency_hiding_scheduler=true'. auto: the ones "
            "measured fastest (trainer/plan/xla_options.py, docs/performance.md) on GPUs, none on CPUs; none: XLA's defaults."
        ),
        on_resume="may change",
    )
    compile_cache: str = opt(
        "",
        "Folder of XLA's compiled programs shared by runs (default: RUN_ROOT/.compile-cache; off).",
        details=(
            "Folder where the runs share XLA's compiled programs (the persistent compilation cache): requeued, "
            "resumed and repeated runs skip compiling. Default: RUN_ROOT/.compile-cache, shared by every run of the "
            "run root; each run compiles into RUN_DIR/compile-cache and publishes there whole files only, so runs "
            "that write at once do no harm. off: no cache."
        ),
        on_resume="may change",
    )
