"""A loss that is not finite (NaN, Inf): a run that diverged must not train on to its end with exit 0.

`--learning-rate 10`, or a pipeline of the user's own handing un-normalised uint8 images to the model,
gave `loss nan` every epoch and a clean exit. The epoch's running loss sum is the job's (every step
psums it), so once one step's loss is not finite the sum stays so, on every rank alike. It is read where
the loop already waits for the devices -- its check points and each epoch's end -- and before anything
is saved there, so no checkpoint ever holds a diverged state:

    --on-nan stop        every rank stops at that check point with one line naming the steps, the epoch
                         and the last good checkpoint (kept), exit non-zero
    --on-nan skip-step   the step itself drops an update whose job-wide loss or gradients are not
                         finite (step/parallel.py: its samples count as none), and counts it; the epoch
                         line says how many
"""

from __future__ import annotations

import math

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths


class Diverged(UsageError):
    """The loss was not finite at a check point (--on-nan stop): one line, every rank alike."""


class NanGuard:
    """Remembers the last check point whose loss was finite, and stops at the first one that is not."""

    def __init__(self, spec, steps_per_call: int, settle_checkpoints):
        """`settle_checkpoints()`: the checkpoints' background writes finished, so the line names the last
        good one whole and is the task's last (Orbax's pool would speak after it)."""
        self.spec, self.k, self.settle_checkpoints = spec, steps_per_call, settle_checkpoints
        self.last_good = None  # global device calls done at the last finite check point

    def begin(self, calls_done: int) -> None:
        """An epoch starts (or resumes) with `calls_done` global device calls done: its tally is finite."""
        self.last_good = calls_done

    def check(self, loss_sum: float, calls_done: int, epoch: int) -> None:
        """At a check point or an epoch's end (`calls_done` global calls done); raises Diverged under stop."""
        if math.isfinite(loss_sum) or self.spec.train.on_nan != "stop":
            self.last_good = calls_done
            return
        self.settle_checkpoints()
        paths = RunPaths(self.spec.run_dir)
        newest = saved.newest(paths)
        kept = (
            f"the last good checkpoint is step {newest.step} ({newest.path}), kept"
            if newest
            else "no checkpoint was written before it"
        )
        first, last = (self.last_good or 0) * self.k + 1, calls_done * self.k
        raise Diverged(
            f"the training loss became {loss_sum} between SGD steps {first} and {last} (epoch {epoch}), so "
            f"the run stopped; {kept}; train again with a lower --learning-rate (now {self.spec.train.learning_rate:g}) "
            f"or normalised images, or `dali-launch --resume {paths.root} --on-nan skip-step` to drop such steps"
        )
