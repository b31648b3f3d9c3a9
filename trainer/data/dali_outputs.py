"""Where a DALI output lies, and the host copies the data path means to make of one.

A pipeline's outputs are TensorLists in host memory (CPU operators) or in GPU memory (after `.gpu()` or a
mixed decoder). A GPU one reaches JAX through DLPack (batches.device_batch) and stays on its GPU. Nothing may
convert one on the host by accident: DALI's GPU tensors have no `__array__`, so `np.asarray` of one is a 0-d
array of dtype object, which JAX refuses later ("dtype('O') is not a valid dtype for JAX type promotion")
far from its cause. `on_gpu` is the one test of where an output lies; `host` is the one host copy, for the
places that need the values on the host (a pre-flight sample, the host's decoded-sample table).
"""

from __future__ import annotations

import numpy as np
from nvidia.dali import backend

# DALI's types of outputs in GPU memory: whatever is one of these takes the GPU branches of the data path.
GPU_TYPES: tuple[type, ...] = (backend.TensorGPU, backend.TensorListGPU)


def on_gpu(output) -> bool:
    """A DALI output (TensorList or Tensor) in GPU memory."""
    return isinstance(output, GPU_TYPES)


def host(output):
    """`output` in host memory: a GPU one copied there (DALI's own `as_cpu`), a CPU one as it is."""
    return output.as_cpu() if on_gpu(output) else output


def host_array(output) -> np.ndarray:
    """A batch of samples of one shape as one host array of its own (DALI reuses its buffers)."""
    return np.array(host(output).as_tensor())
