"""DALI and JAX must be built for the same CUDA major version; say exactly what to install if not."""

from __future__ import annotations

from importlib import metadata

from dali_launch.trainer.errors import UsageError

DALI = {"nvidia-dali-cuda120": 12, "nvidia-dali-cuda130": 13}
JAX_CUDA = {"jax-cuda12-plugin": 12, "jax-cuda13-plugin": 13}
EXTRA = {12: "cuda12", 13: "cuda13"}


def installed(names: dict[str, int]) -> dict[str, int]:
    found = {}
    for name, cuda in names.items():
        try:
            metadata.version(name)
            found[name] = cuda
        except metadata.PackageNotFoundError:
            pass
    return found


def check(dali: dict[str, int] | None = None, jax_cuda: dict[str, int] | None = None) -> str:
    """Returns the flavour ('cpu', 'cuda12', 'cuda13'); raises with the fix when builds disagree."""
    dali = installed(DALI) if dali is None else dali
    jax_cuda = installed(JAX_CUDA) if jax_cuda is None else jax_cuda
    if not dali:
        raise UsageError("DALI is not installed; pip install 'dali-launch[cuda12]' (or [cuda13], or [cpu])")
    if len(dali) > 1:
        raise UsageError(
            f"both {' and '.join(sorted(dali))} are installed and share one module; "
            f"pip uninstall -y {' '.join(sorted(dali))}, then install one flavour"
        )
    if len(jax_cuda) > 1:
        raise UsageError(f"both {' and '.join(sorted(jax_cuda))} are installed; keep the one matching DALI")
    ((dali_name, dali_cuda),) = dali.items()
    if not jax_cuda:
        return "cpu"  # CPU JAX runs beside any DALI build: DALI then works with device_id=None
    ((jax_name, jax_cuda_major),) = jax_cuda.items()
    if jax_cuda_major != dali_cuda:
        want = EXTRA[jax_cuda_major]
        raise UsageError(
            f"{dali_name} (CUDA {dali_cuda}) does not match {jax_name} (CUDA {jax_cuda_major}); "
            f"pip uninstall -y {dali_name} && pip install 'dali-launch[{want}]'"
        )
    return EXTRA[dali_cuda]
