"""The seam between the set-up and the loop (set_up.py, train.py) and how device calls run (--parallel):
the one interface step/parallel.py's Pmap and Sharded both implement, whichever resolve.parallel picked."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol


class Runner(Protocol):
    """How this process runs device calls (--parallel): what set_up.py and train.py hold, whichever it is."""

    name: str
    call: Callable  # (state, tally, images, labels, valid) -> (state, tally): one device call of k SGD steps
    batch_size: int  # samples per device and SGD step
    buffers: tuple[int, int] | None  # XLA's count of the call's buffers on a device, once compile_ahead has it
    offload: bool  # the optimizer's state in host memory (--offload)
    sharded: bool  # the state split over the devices (--mesh fsdp, tensor): gathering it takes every process

    def compile_ahead(self, shapes, *args) -> threading.Thread:
        """The first call compiled in a thread for a state of `shapes` (a finished thread where it cannot)."""

    def buffers_at(self, batch: int) -> tuple[int, int] | None:
        """XLA's count of the compiled call's buffers at `batch` samples per device and step (None: none)."""

    def sharded_shapes(self, shapes):
        """A sharded state's abstract arrays as they lie on the devices (their shardings, in the devices' own
        memory); None where each device holds the state whole. What a checkpoint is restored into (each process
        reads its own shards) and what the evaluation applies as it lies (not gathered)."""

    def place(self, state):
        """The host state on this process's devices, laid out as `call` takes it (a restored sharded state,
        already laid out, as it is)."""

    def replica(self, tree):
        """One replica of a placed tree: this process's first device's copy."""

    def whole(self, tree):
        """A placed tree with a whole copy of every array on every device (a sharded state gathered)."""

    def saved(self, state):
        """What a checkpoint holds of a placed state: one replica, or a sharded state as it lies."""

    def device_bytes(self, shapes) -> int:
        """The bytes a state of these abstract `shapes` takes on one device, as `place` lays it out."""

    def host_bytes(self, shapes) -> int:
        """The bytes of it that --offload keeps in host memory for one device instead."""
