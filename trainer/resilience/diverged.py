"""A loss that is not finite (NaN, Inf): a run that diverged must not train on to its end with exit 0.

`--learning-rate 10`, or a pipeline of the user's own handing un-normalised uint8 images to the model,
gave `loss nan` every epoch and a clean exit. The epoch's running loss sum is the job's (every step
psums it), so once one step's loss is not finite the sum stays so, on every rank alike. It is read where
the loop already waits for the devices -- its sync points and each epoch's end -- and before anything
is saved there, so no checkpoint ever holds a diverged state:

    --on-nan stop        every rank stops at that sync point with one line naming the steps, the epoch
                         and the last good checkpoint (kept), exit non-zero
    --on-nan skip-step   the step itself drops an update whose job-wide loss or gradients are not
                         finite (step/parallel.py: its samples count as none), and counts it; the epoch
                         line says how many; an epoch whose every step was dropped stops the run as
                         `stop` does (its parameters no longer give a finite loss on any batch: training
                         on would only skip every later step too)
"""

from __future__ import annotations

import math

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths


class Diverged(UsageError):
    """The loss was not finite at a sync point (--on-nan stop): one line, every rank alike. `resumable`:
    whether its newest checkpoint is worth resuming (ending.failures_recorded records it for `status`)."""

    def __init__(self, line: str, resumable: bool = True):
        super().__init__(line)
        self.resumable = resumable


class NanGuard:
    """Remembers the last sync point whose loss was finite, and stops at the first one that is not."""

    def __init__(self, spec, steps_per_call: int, settle_checkpoints, learning_rate: float):
        """`settle_checkpoints()`: the checkpoints' background writes finished, so the line names the last
        good one whole and is the task's last (Orbax's pool would speak after it); `learning_rate`: the run's."""
        self.spec, self.k, self.settle_checkpoints = spec, steps_per_call, settle_checkpoints
        self.learning_rate = learning_rate
        self.last_good = None  # global device calls done at the last finite sync point

    def begin(self, calls_done: int) -> None:
        """An epoch starts (or resumes) with `calls_done` global device calls done: its tally is finite."""
        self.last_good = calls_done

    def check(self, loss_sum: float, calls_done: int, epoch: int) -> None:
        """At a sync point or an epoch's end (`calls_done` global calls done); raises Diverged under stop."""
        if math.isfinite(loss_sum) or self.spec.step.on_nan != "stop":
            self.last_good = calls_done
            return
        first, last = (self.last_good or 0) * self.k + 1, calls_done * self.k
        raise Diverged(
            f"the training loss became {loss_sum} between SGD steps {first} and {last} (epoch {epoch}), so "
            f"the run stopped; {self._kept()}; train again with a lower --learning-rate "
            f"(now {self.learning_rate:g}) or normalised images, or "
            f"`dali-launch --resume {RunPaths(self.spec.run_dir).root} --on-nan skip-step` to drop such steps"
        )

    def check_epoch(self, loss_sum: float, count: float, skipped: float, calls_done: int, epoch: int) -> None:
        """At an epoch's end: `check`, and under skip-step an epoch that counted no sample (every step
        dropped) stops too, or its loss would be 0/0 and every later epoch the same."""
        self.check(loss_sum, calls_done, epoch)
        if count == 0 and skipped:
            newest = self._newest()
            # that checkpoint's parameters are finite but gave no finite step: resuming it would do the same
            held = f"; the newest checkpoint, step {newest.step}, holds the parameters that did so" if newest else ""
            raise Diverged(
                f"the training loss or gradients were not finite in every SGD step of epoch {epoch} (--on-nan "
                f"skip-step dropped all {int(skipped)} this task ran), so the run stopped{held}; train again "
                f"from the start with a lower --learning-rate (now {self.learning_rate:g}) or normalised images",
                resumable=False,
            )

    def _kept(self) -> str:
        """The last good checkpoint, named (its line is the task's last)."""
        newest = self._newest()
        if newest is None:
            return "no checkpoint was written before it"
        return f"the last good checkpoint is step {newest.step} ({newest.path}), kept"

    def _newest(self):
        """The run's newest checkpoint once the background writes are done (saved.newest), or None."""
        self.settle_checkpoints()
        return saved.newest(RunPaths(self.spec.run_dir))
