"""Checkpoints, preemption and the step watchdog.

The [resilience] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class ResilienceConfig:
    """Checkpoints, preemption and the step watchdog."""

    checkpoint_every_steps: int = opt(
        0,
        "Also checkpoint every N steps (0: off).",
        details="Also checkpoint every N SGD steps within an epoch (0: not by steps).",
        on_resume="may change",
    )
    checkpoint_every_min: float = opt(
        10.0,
        "Also checkpoint every N minutes (0: off); always at epoch ends.",
        details=(
            "Also checkpoint when this many minutes passed since the last checkpoint (0: not by time). "
            "Checkpoints are always taken at epoch ends."
        ),
        on_resume="may change",
    )
    keep_checkpoints: int = opt(
        3,
        "Checkpoints kept.",
        details="Checkpoints kept; older ones are deleted once a newer one is complete.",
        on_resume="may change",
    )
    checkpoint_async: str = opt(
        "auto",
        "Write checkpoints in the background: on, off, or auto.",
        details=(
            "Write checkpoints in the background (Orbax's asynchronous checkpointing): the step waits only while "
            "the state is copied to host memory (and for the previous checkpoint, if it is still being written). "
            "on, off, or auto: on for a train state of 64 MiB or more, off below, where a foreground write is cheaper "
            "than a write beside the next steps (docs/resilience.md). "
            "Each is atomic either way: a rank killed mid-write leaves the newest complete one to resume from."
        ),
        choices=("auto", "on", "off"),
        on_resume="may change",
    )
    max_requeues: int = opt(
        3,
        "Times a preempted or timed-out SLURM job requeues itself.",
        details="Times a preempted or timed-out SLURM job requeues itself from its checkpoint.",
        on_resume="may change",
    )
    # 20 s: found within 24 s, few false alarms (why: resilience/watchdog.py, at BEAT_S)
    watchdog_s: int = opt(
        20,
        "A rank silent this long (stopped, hung, dead) stops the job.",
        details="A rank whose heartbeat is older than this (stopped, hung, dead) stops the job.",
        on_resume="may change",
    )
    on_stuck: str = opt(
        "stop",
        "What the watchdog does: stop, or requeue from the last checkpoint.",
        details="What the watchdog does: stop the job, or requeue it from its last checkpoint.",
        choices=("stop", "requeue"),
        on_resume="may change",
    )
