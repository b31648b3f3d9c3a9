"""--profile-steps A:B: a JAX profiler trace of those global SGD steps on --profile-ranks.

The trace covers whole device calls (--steps-per-call steps each): from the call holding step A,
DALI's wait for its batch included, to the end of the call holding step B-1, which is waited for
(one sync, only then). It lands in RUN_DIR/tensorboard/rank-N/plugins/profile/<time>/ as
<host>.xplane.pb (TensorBoard's profile plugin, XProf) and <host>.trace.json.gz (Perfetto, chrome://tracing).
"""

from __future__ import annotations

import jax

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths


def check(spec: TaskSpec, steps_per_epoch: int) -> None:
    """Before the first step, with the steps counted exactly (the launcher bounds them: checks.profile_within):
    a range that starts past the run's last SGD step would trace nothing, and say nothing."""
    steps, total = spec.observe.profile_range(), spec.step.epochs * steps_per_epoch
    if steps is not None and steps[0] >= total:
        first = max(0, total - 10)
        raise UsageError(
            f"--profile-steps {spec.observe.profile_steps} starts past the run's last SGD step {total - 1} "
            f"({spec.step.epochs} × {steps_per_epoch} steps an epoch); trace steps below {total}, e.g. --profile-steps "
            f"{first}:{total}"
        )


class Profile:
    def __init__(self, spec: TaskSpec, process_index: int, steps_per_call: int, say=print):
        steps = spec.observe.profile_range()
        chosen = steps is not None and process_index in spec.observe.ranks_to_profile()
        first, end = steps if chosen else (0, 0)
        self.first_call, self.end_call = first // steps_per_call, -(-end // steps_per_call)  # calls holding them
        self.folder = RunPaths(spec.run_dir).profile(process_index)
        self.steps, self.say, self.tracing = (first, end), say, False
        self.k, self.last_call = steps_per_call, None  # the last call traced

    def before(self, call: int) -> None:
        """Before global device call `call` fetches its batch."""
        if self.first_call <= call < self.end_call and not self.tracing:
            jax.profiler.start_trace(str(self.folder))
            self.tracing = True

    def after(self, call: int, outputs) -> None:
        """After global device call `call` was dispatched; `outputs` are what it returns."""
        self.last_call = call if self.tracing else self.last_call
        if self.tracing and call + 1 >= self.end_call:
            jax.block_until_ready(outputs)
            self.stop()

    def stop(self) -> None:
        """Ends the trace: at its last call, or where the run ended first (which the line then says)."""
        if self.tracing:
            jax.profiler.stop_trace()
            self.tracing = False
            (first, end), last = self.steps, self.last_call
            ran = first if last is None else (last + 1) * self.k  # None: its first call failed
            cut = f" (the run ended at step {ran}, before the {first}:{end} asked)" if ran < end else ""
            self.say(f"profile of steps {first}:{min(end, ran)} written to {self.folder}{cut}")
