"""What a run is doing now, for `dali-launch status`: process 0's start-up phase, or its epoch and step.

Process 0 keeps it in memory and a thread of its own writes it to progress.json: at once when a phase
begins (a start-up phase, an epoch's end), and at most every WRITE_S while the steps run, only when it
changed. The loop's part per device call is one addition in memory: no file work on a step's path, and
at most one file written every WRITE_S beside them. Every other process keeps nothing.
"""

from __future__ import annotations

import json
import threading
import time

from dali_launch.trainer.run_dir import RunPaths, write_atomic

WRITE_S = 5.0
# Startup.mark names the phase that has just ended; what the task does next, as `status` says it.
NEXT = {
    None: "importing its libraries",
    "imports": "meeting the other processes at the coordinator",
    "jax initialized": "reading its checkpoints",
    "checkpoints read": "building the data pipelines",
    "pipelines built": "initialising the model",
    "model initialised": "compiling the first step",
}


class Progress:
    def __init__(self, paths: RunPaths, writes: bool):
        """`writes`: this process tells (process 0); elsewhere every call returns at once."""
        self.paths, self.writes = paths, writes
        self.said = {"doing": f"starting: {NEXT[None]}", "since": time.time()}
        self.steps = self.done = self.per_call = 0
        self.stepping: dict | None = None  # the epoch whose steps run, once the loop began one
        self.written: tuple | None = None
        self._wake, self._stop = threading.Event(), threading.Event()
        if writes:
            self._wake.set()  # written at once: a requeued job's earlier start said something else
            threading.Thread(target=self._run, name="dali-launch-progress", daemon=True).start()

    def phase(self, ended: str) -> None:
        """Startup.mark's phase `ended`: the next one begins; after the first step, the steps of `epoch`'s."""
        if not self.writes:
            return
        if ended in NEXT:
            self._say({"doing": f"starting: {NEXT[ended]}", "since": time.time()})
        elif ended == "first step" and self.stepping:
            self._say(self.stepping)

    def epoch(self, epoch: int, calls: int, done: int, per_call: int):
        """Epoch `epoch`'s `calls` device calls begin at `done`, `per_call` SGD steps each; returns what the
        loop calls after each device call. Until the run's first step is done, that step is said: it compiles."""
        if not self.writes:
            return _nothing
        self.steps, self.done, self.per_call = calls * per_call, done * per_call, per_call
        first = self.stepping is None
        self.stepping = {"doing": "epoch", "epoch": epoch, "since": time.time()}
        if not first:
            self._say(self.stepping)
        return self._advance

    def finishing(self, epoch: int) -> None:
        """The epoch's steps are done: its evaluation, its line and its checkpoint follow."""
        if self.writes:
            self._say({"doing": f"epoch {epoch}: evaluating and checkpointing", "since": time.time()})

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _advance(self) -> None:
        self.done += self.per_call

    def _say(self, said: dict) -> None:
        self.said = said
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(WRITE_S)
            self._wake.clear()
            if not self._stop.is_set():
                self._write()

    def _write(self) -> None:
        said = dict(self.said)
        if said["doing"] == "epoch":  # `status` says a phase with its length, the steps with their age if old
            said.update(doing=f"epoch {said.pop('epoch')}, step {self.done:,} of {self.steps:,}", stepping=True)
        now = (said["doing"], said["since"])
        if now != self.written:
            try:
                write_atomic(self.paths.progress, json.dumps({**said, "at": time.time()}))
            except OSError:  # a full or failing disk: the run's own writes say so; `status` shows less
                return
            self.written = now


def _nothing() -> None:
    pass
