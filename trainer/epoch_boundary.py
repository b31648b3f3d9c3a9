"""Between two epochs: how long the devices sat idle there, and how much of the next epoch hides the checkpoint.

An epoch ends with a sync (its loss is read), then the host evaluates, reports and takes the checkpoint that
starts the next epoch: host copies of the state and DALI's reader states, before the next call donates the
state's buffers. Writing it (Orbax: 0.12-0.15 s an epoch on an H200 for the tasks' small states, written in the
foreground) need not keep the devices waiting: the next epoch's first calls can be dispatched first, their
batches already in DALI's prefetch queue, and the write done while they run. `calls_ahead` says how many: the
fewest whose time (the last epoch's, per call) covers the last write, where DALI holds that many batches ready;
else none, and the write goes first, as before. The checkpoint is the same either way (the state and reader
states at the epoch's start), so exactly-once epochs and resumes are untouched.
"""

from __future__ import annotations

import math
import time


class Boundary:
    """The loop's clock at the epoch boundary: `ended` as an epoch's last call is done, `resumed` as the next
    epoch's first call is dispatched."""

    def __init__(self, ready_batches: int):
        self.ready = ready_batches  # DALI's prefetch queue: batches made ahead of the trainer
        self.ended_at: float | None = None
        self.began_at: float | None = None
        self.call_s: float | None = None  # the last epoch's time per device call

    def resumed(self) -> float | None:
        """The first call of an epoch is dispatched: the host's time since the last epoch ended (None for the
        run's first epoch), what the devices spent idle between the two."""
        self.began_at = time.perf_counter()
        return None if self.ended_at is None else self.began_at - self.ended_at

    def ended(self, calls: int) -> None:
        """An epoch's `calls` device calls are done (its loss read)."""
        self.ended_at = time.perf_counter()
        if self.began_at is not None and calls > 0:
            self.call_s = (self.ended_at - self.began_at) / calls

    def calls_ahead(self, write_s: float | None) -> int:
        """The next epoch's calls dispatched before the epoch-end checkpoint is written (see the module)."""
        return calls_ahead(write_s, self.call_s, self.ready)


def calls_ahead(write_s: float | None, call_s: float | None, ready: int) -> int:
    """The fewest calls of `call_s` each that last `write_s`, if at most `ready`; else 0 (nothing measured yet: 0)."""
    if not write_s or not call_s:
        return 0
    calls = math.ceil(write_s / call_s)
    return calls if calls <= ready else 0
