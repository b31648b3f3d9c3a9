"""A stand-in for DALI's GPU outputs, backed by host memory: the one mock of the suite, for what cannot exist
here (a GPU). With it, every output of every pipeline that runs is a GPU output, so every branch a GPU output
takes in the data path runs on CPU devices, and a host conversion of one fails here as it fails on a GPU.

`TensorListGPU` and `TensorGPU` have the part of DALI's own classes' interface that the project uses, with
their semantics (`shape()`, `layout()`, `ndim()` and `device_id()` methods, `dtype` a property, `as_cpu()` a
copy, DLPack), and nothing the real ones lack (tests/test_gpu_outputs.py compares them). Like the real
ones they have no `__array__`: `np.asarray` of one is an array of dtype object. Two differences cannot be
helped: their memory is the host's, so `__dlpack_device__` says the CPU (JAX's CPU backend takes them), and
they have no `__cuda_array_interface__`.

    conftest.py's gpu_outputs fixture: in the test's process, Pipeline.run's outputs stand-ins, and
                 dali_outputs.GPU_TYPES extended to take them for GPU outputs
    sitecustomize.py (this folder on PYTHONPATH; conftest.py's gpu_runs): the same in every process of a run

`counts` says what the stand-in saw (outputs made, DLPack exports, host copies); with GPU_STANDIN_COUNTS set to a
folder, each process writes its counts there when it exits.
"""

from __future__ import annotations

import collections
import json
import os

import numpy as np

counts: collections.Counter = collections.Counter()
COUNTS_DIR = "GPU_STANDIN_COUNTS"
KDL_CPU = 1  # DLPack's device type of host memory (DLDeviceType.kDLCPU)


class TensorGPU:
    """One DALI tensor in "GPU" memory: DALI's own TensorCPU (`host`), kept as DALI keeps a GPU output."""

    def __init__(self, host, device_id: int = 0):
        self._host, self._device_id = host, device_id

    def shape(self) -> list:
        return self._host.shape()

    @property
    def dtype(self):
        return self._host.dtype

    def layout(self) -> str:
        return self._host.layout()

    def ndim(self) -> int:
        return self._host.ndim()

    def device_id(self) -> int:
        return self._device_id

    def as_cpu(self):
        """A TensorCPU holding a copy, as DALI's device-to-host copy gives one."""
        from nvidia.dali import backend

        counts["as_cpu"] += 1
        return backend.TensorCPU(np.array(self._host), self._host.layout())

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """DALI's buffer itself, not a copy (DALI's capsule wraps its data too); `stream` has no meaning here."""
        counts["dlpack"] += 1
        return np.asarray(self._host).__dlpack__()

    def __dlpack_device__(self) -> tuple:
        return (KDL_CPU, 0)


class TensorListGPU:
    """One DALI batch in "GPU" memory: DALI's own TensorListCPU (`host`), the pipeline's output."""

    def __init__(self, host, device_id: int = 0):
        self._host, self._device_id = host, device_id
        counts["outputs"] += 1

    def __len__(self) -> int:
        return len(self._host)

    def __getitem__(self, i: int) -> TensorGPU:
        return TensorGPU(self._host[i], self._device_id)

    def shape(self) -> list:
        return self._host.shape()

    @property
    def dtype(self):
        return self._host.dtype

    def layout(self) -> str:
        return self._host.layout()

    def ndim(self) -> int:
        return self._host.ndim()

    def device_id(self) -> int:
        return self._device_id

    def is_dense_tensor(self) -> bool:
        return self._host.is_dense_tensor()

    def as_tensor(self) -> TensorGPU:
        """A view of the batch as one tensor: DALI's own as_tensor (it refuses a batch of unequal shapes)."""
        return TensorGPU(self._host.as_tensor(), self._device_id)

    def as_cpu(self):
        """A TensorListCPU holding a copy, as DALI's device-to-host copy gives one."""
        from nvidia.dali import backend

        counts["as_cpu"] += 1
        return backend.TensorListCPU([np.array(t) for t in self._host], self._host.layout())


def on_gpu(outputs):
    """A pipeline's outputs (TensorLists) as GPU ones: what `Pipeline.run` returns under the stand-in."""
    return tuple(TensorListGPU(out) if type(out).__name__ == "TensorListCPU" else out for out in outputs)


def wrapped_run(run):
    """`Pipeline.run` whose outputs are GPU ones."""

    def run_on_gpu(self, *args, **kwargs):
        return on_gpu(run(self, *args, **kwargs))

    run_on_gpu.original = run  # DALI's own: the CPU outputs
    return run_on_gpu


def extend(module) -> None:
    """dali_outputs' GPU types, the stand-in's among them."""
    module.GPU_TYPES = (*module.GPU_TYPES, TensorListGPU, TensorGPU)


def write_counts() -> None:
    """This process's counts, into GPU_STANDIN_COUNTS's folder (atexit)."""
    folder = os.environ.get(COUNTS_DIR)
    if folder and counts:
        with open(os.path.join(folder, f"process-{os.getpid()}.json"), "w") as f:
            json.dump(dict(counts), f)
