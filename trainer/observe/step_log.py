"""Training scalars every --log-every-steps SGD steps, from what the loop already holds at its sync points.

The loop syncs with the devices only at sync points (and epoch ends); there the epoch's tally (loss
and sample sums) is ready, so reading two scalars of it costs no extra sync. The log is written at
the first sync point at or past each multiple of N: the points a run logs depend only on the
check-point grid, so a resumed run logs the same steps as one never interrupted. Each logged value
covers the interval since the previous logged point; rates leave out the run's first device call
(compilation).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import numpy as np

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.observe.trackers import Trackers


def _read(tally) -> tuple[float, float]:
    """The epoch's loss and sample sums, from this process's first device: one transfer, no device op
    (indexing a device array would dispatch one, ~0.1 ms on CPU)."""
    loss, count = jax.device_get((tally["loss"].addressable_data(0), tally["count"].addressable_data(0)))
    return float(np.ravel(loss)[0]), float(np.ravel(count)[0])


@dataclass
class Sums:
    loss: float = 0.0
    loss_count: float = 0.0  # samples behind `loss`
    count: float = 0.0  # samples behind the rates
    wait_s: float = 0.0
    time_s: float = 0.0
    steps: int = 0


class StepLog:
    """Process 0 logs; elsewhere every call returns at once."""

    def __init__(self, spec: TaskSpec, trackers: Trackers, steps_per_call: int, schedule):
        """`schedule`: the run's learning rate of each optimizer update (the train state's)."""
        self.spec, self.trackers, self.k = spec, trackers, steps_per_call
        self.rate = schedule if trackers else None
        self.every = spec.observe.log_every_steps if trackers else 0
        self.sums = Sums()
        self.point_step = 0  # the last sync point's global step
        self.at = None  # the last reading: (step, loss, count, data wait, clock) of the epoch's running values

    def begin_epoch(self, calls_before: int, tally: dict | None) -> None:
        """`calls_before`: global device calls done; `tally`: the epoch's so far (host; None: nothing yet)."""
        if self.every:
            loss, count = (float(tally["loss"]), float(tally["count"])) if tally else (0.0, 0.0)
            self.point_step = calls_before * self.k
            self.at = (self.point_step, loss, count, 0.0, time.perf_counter())

    def compiled(self, tally, data_wait_s: float) -> None:
        """After the run's first device call (synced): its time is compilation, not a rate."""
        if self.every:
            self._advance(self.at[0] + self.k, *_read(tally), data_wait_s)
            self.sums.count = self.sums.time_s = self.sums.wait_s = self.sums.steps = 0

    def point(self, calls_done: int, tally, data_wait_s: float) -> None:
        """At a sync point or an epoch end (`tally` ready), `calls_done` global device calls done."""
        if not self.every:
            return
        step, before = calls_done * self.k, self.point_step
        self._advance(step, *_read(tally), data_wait_s)
        self.point_step = step
        if step // self.every > before // self.every:
            self._write(step)

    def _advance(self, step: int, loss: float, count: float, wait_s: float) -> None:
        """Adds what happened since the last reading to the sums."""
        step0, loss0, count0, wait0, clock0 = self.at
        now = time.perf_counter()
        s = self.sums
        s.loss, s.loss_count, s.count = s.loss + loss - loss0, s.loss_count + count - count0, s.count + count - count0
        s.wait_s, s.time_s, s.steps = s.wait_s + wait_s - wait0, s.time_s + now - clock0, s.steps + step - step0
        self.at = (step, loss, count, wait_s, now)

    def _write(self, step: int) -> None:
        s = self.sums
        values = {
            "train/loss": s.loss / s.loss_count if s.loss_count else None,
            "train/learning_rate": float(self.rate(max(step - 1, 0) // self.spec.optimizer.accumulate_steps)),
        }
        if s.time_s > 0 and s.steps:
            values |= {
                "perf/images_per_s": s.count / s.time_s,
                "perf/step_time_ms": 1000 * s.time_s / s.steps,
                "perf/data_wait_fraction": s.wait_s / s.time_s,
            }
        self.trackers.scalars(step, values)
        self.sums = Sums()
