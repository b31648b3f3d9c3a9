"""What a run shows of itself beyond metrics.jsonl: TensorBoard and W&B scalars, profiler traces.

The [observe] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class ObserveConfig:
    """What a run shows of itself beyond metrics.jsonl: TensorBoard and W&B scalars, profiler traces."""

    log_every_steps: int = opt(
        100,
        "Write training scalars every N steps (0: per epoch only).",
        details=(
            "Write training scalars (loss, learning rate, images/s, data wait, step time) at the first sync point "
            "past every N SGD steps, from values read there anyway: sync points come every --sync-every-steps steps "
            "on CPU, every 256 on GPUs, so logging adds no device sync. 0: epoch scalars only."
        ),
        on_resume="may change",
    )
    tensorboard: bool = opt(
        True,
        "Write TensorBoard event files into RUN_DIR/tensorboard.",
        details="Write TensorBoard event files into RUN_DIR/tensorboard (`tensorboard --logdir runs/` shows every run).",
        on_resume="may change",
    )
    wandb_project: str | None = opt(
        None,
        "Also log to this Weights & Biases project.",
        details=(
            "Also log to this Weights & Biases project (pip install 'dali-launch[wandb]'). The run id is kept in "
            "the run directory: a requeued or resumed run continues the same W&B run."
        ),
        on_resume="may change",
    )
    wandb_mode: str = opt(
        "auto",
        "W&B mode: online, offline, or auto.",
        details="W&B mode: online, offline (`wandb sync` later), or auto ($WANDB_MODE, else online).",
        choices=("auto", "online", "offline"),
        on_resume="may change",
    )
    profile_steps: str = opt(
        "",
        "Trace global steps A:B with the JAX profiler.",
        details=(
            "Trace SGD steps A to B-1 (A:B, global steps) with the JAX profiler into RUN_DIR/tensorboard/rank-N "
            "(TensorBoard's profile plugin, XProf, Perfetto). Steps fused in one device call are traced together."
        ),
        on_resume="may change",
    )
    profile_ranks: str = opt(
        "0",
        "Ranks that trace --profile-steps, e.g. 0,1.",
        details="Processes that trace --profile-steps: comma-separated ranks, e.g. 0,1.",
        on_resume="may change",
    )

    def profile_range(self) -> tuple[int, int] | None:
        """--profile-steps as (first, end), end excluded; None when unset. ValueError when malformed."""
        if not self.profile_steps:
            return None
        first, end = (int(part) for part in self.profile_steps.split(":"))
        if not 0 <= first < end:
            raise ValueError(self.profile_steps)
        return first, end

    def ranks_to_profile(self) -> set[int]:
        """--profile-ranks as a set of process ids. ValueError when malformed."""
        ranks = {int(part) for part in self.profile_ranks.split(",")}
        if min(ranks) < 0:
            raise ValueError(self.profile_ranks)
        return ranks
