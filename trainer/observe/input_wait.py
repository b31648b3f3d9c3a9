"""How long the devices sat idle waiting for the next batch, and how long the host waited for it.

The host runs ahead of the devices: while it waits for DALI, the calls it dispatched earlier may still
be running (on GPUs the host leaves a call only once its last kernels are queued). Its wait then costs
nothing, so the host's time in `next()` overstates what the input costs. While the host waits, a
thread polls whether the last dispatched call has finished; from then until the batch is in hand the
devices have nothing to do: that is the data wait. Both are kept; the host's wait shows how close
DALI runs to the devices.
"""

from __future__ import annotations

import threading
import time

POLL_S = 0.0002  # the idle time's resolution; polling only while the host waits
PARK_TIMEOUT_S = 10.0  # is_ready() returns at once: a poller this late is broken


class InputWait:
    """`fetch` wraps each read of a batch; `idle_s` and `host_s` add up over its life (a `with` block:
    the poller thread ends with it, also when the loop raises)."""

    def __init__(self):
        self.idle_s = self.host_s = 0.0
        self._running = None
        self._ready_at: float | None = None
        self._go, self._stop, self._parked = threading.Event(), threading.Event(), threading.Event()
        self._closed = False
        self._poller = threading.Thread(target=self._poll, name="input-wait", daemon=True)
        self._poller.start()

    def fetch(self, read, running):
        """`read()`'s batch. `running`: an output of the last dispatched device call (anything with
        `is_ready()`); it must stay alive until this returns (a donated array is freed at the next call)."""
        start = time.perf_counter()
        ready_at = start if running.is_ready() else None
        if ready_at is None:
            self._watch(running)
        try:
            batch = read()
        finally:
            if ready_at is None:
                ready_at = self._unwatch()
        end = time.perf_counter()
        self.host_s += end - start
        if ready_at is not None:
            self.idle_s += end - max(ready_at, start)
        return batch

    def __enter__(self) -> InputWait:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._go.set()
        self._poller.join(PARK_TIMEOUT_S)

    def _watch(self, running) -> None:
        self._running, self._ready_at = running, None
        self._stop.clear()
        self._parked.clear()
        self._go.set()

    def _unwatch(self) -> float | None:
        self._stop.set()
        if not self._parked.wait(PARK_TIMEOUT_S):
            raise RuntimeError(f"the input-wait poller did not stop within {PARK_TIMEOUT_S:.0f} s")
        self._running = None
        return self._ready_at

    def _poll(self) -> None:
        while True:
            self._go.wait()
            self._go.clear()
            if self._closed:
                return
            running = self._running
            while not self._stop.is_set():
                if running.is_ready():
                    self._ready_at = time.perf_counter()
                    break
                self._stop.wait(POLL_S)
            del running  # holds no reference once parked: the array may be donated next
            self._parked.set()
