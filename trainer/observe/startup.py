"""Where the time from launch to the first training step goes: one timestamp per start-up phase.

Local mode knows when the launcher started the ranks (LAUNCHED_AT); elsewhere the clock starts
with the task. Reported once, with the run's first epoch.
"""
from __future__ import annotations

import os
import time

from dali_launch.trainer.topology import LAUNCHED_AT


class Startup:
    def __init__(self):
        launched = os.environ.get(LAUNCHED_AT)
        self.since = "launch" if launched else "task start"
        self.origin = float(launched) if launched else time.time()
        self.phases: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        """`phase` has just ended."""
        self.phases[phase] = round(time.time() - self.origin, 3)
