"""Where the time from launch to the first training step goes: one timestamp per start-up phase.

Local mode knows when the launcher started the ranks (LAUNCHED_AT); elsewhere the clock starts
with the task. Reported once, with the run's first epoch.
"""

from __future__ import annotations

import os
import threading
import time

from dali_launch.trainer.topology import LAUNCHED_AT


class Startup:
    def __init__(self):
        launched = os.environ.get(LAUNCHED_AT)
        self.since = "launch" if launched else "task start"
        self.origin = float(launched) if launched else time.time()
        self.phases: dict[str, float] = {}
        self.warming: threading.Thread | None = None
        self.listener = None  # told each phase that ends (observe/progress.py: what `status` says)

    def mark(self, phase: str) -> None:
        """`phase` has just ended."""
        self.phases[phase] = round(time.time() - self.origin, 3)
        if self.listener:
            self.listener(phase)

    def warm_up(self, devices: list) -> None:
        """Starts the devices' first host->device transfer in a thread, as soon as JAX knows them: on a GPU it
        sets up the CUDA context and pinned buffers (1.65 s on an H200), time the imports of Flax, Optax,
        Orbax and DALI, the pipelines' build and the model's CPU init can hide (XLA leaves the GIL while it
        works). `warmed` joins it, before the first step."""
        import jax
        import numpy as np

        def put() -> None:
            for device in devices:
                jax.device_put(np.zeros(8, np.float32), device).block_until_ready()

        self.warming = threading.Thread(target=put, name="dali-launch-warm-up", daemon=True)
        self.warming.start()

    def warmed(self) -> None:
        if self.warming is not None:
            self.warming.join()
