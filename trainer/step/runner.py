"""The seam between the build and the loop (set_up.py, train.py) and how device calls run (--parallel): the one
interface step/parallel.py's Pmap and Sharded both implement, whichever the step plan's partition picked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Runner(Protocol):
    """How this process runs device calls: what the build and the loop hold, whichever runner it is."""

    name: str  # pmap or sharded
    call: Callable  # (state, tally, batch) -> (state, tally): one device call of k SGD steps (step/sgd.py)
    batch_size: int  # samples per device and SGD step
    sharded: bool  # the state split over the devices (--mesh fsdp, tensor): gathering it takes every process

    def compile(self, shapes, *args, batch_size: int | None = None):
        """`call` compiled ahead for a state of these abstract `shapes` (step/compiled.py); None where the runner
        compiles at its first call."""

    def restore_shapes(self, shapes):
        """A sharded state's abstract arrays as they lie on the devices: what a checkpoint is restored into and the
        evaluation applies; None where each device holds the state whole."""

    def place(self, state):
        """The host state on this process's devices, laid out as `call` takes it."""

    def replica(self, tree):
        """One replica of a placed tree: this process's first device's copy."""

    def whole(self, tree):
        """A placed tree with a whole copy of every array on every device (a sharded state gathered)."""

    def saved(self, state):
        """What a checkpoint holds of a placed state: one replica, or a sharded state as it lies."""
