"""What a running run says it does (trainer/observe/progress.py) and how `status` says it (backends/job.py):
process 0's thread writes progress.json, in this process, with its own clock made short."""

from __future__ import annotations

import json
import time

import pytest
from conftest import wait_for

from dali_launch.launcher.backends.job import doing
from dali_launch.trainer.observe import progress
from dali_launch.trainer.run_dir import RunPaths


@pytest.fixture
def live(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "WRITE_S", 0.05)
    told = progress.Progress(RunPaths(tmp_path), writes=True)
    yield told
    told.stop()


def _says(paths: RunPaths, text: str) -> str:
    """Waits until `status` would say `text` (the thread writes within WRITE_S); returns what it says."""
    return wait_for(lambda: doing(paths).startswith(text) and doing(paths), timeout_s=10)


def test_the_start_up_phase_then_the_steps_then_the_epochs_end(live):
    paths = live.paths
    assert _says(paths, "starting: importing its libraries, for ").endswith(" s")  # at once: the task's start
    live.phase("model initialised")
    _says(paths, "starting: compiling the first step, for ")
    advance = live.epoch(0, 100, 10, 2)  # resumed 10 calls into the epoch, 2 SGD steps a call
    time.sleep(0.2)
    assert doing(paths).startswith("starting: compiling the first step")  # until the first step is done
    advance()
    live.phase("first step")
    assert _says(paths, "epoch 0, step 22 of 200") == "epoch 0, step 22 of 200"
    for _ in range(5):
        advance()
    _says(paths, "epoch 0, step 32 of 200")
    live.finishing(0)
    _says(paths, "epoch 0: evaluating and checkpointing, for ")
    live.epoch(1, 100, 0, 2)
    _says(paths, "epoch 1, step 0 of 200")


def test_only_process_0_writes_and_old_steps_are_said_with_their_age(tmp_path):
    quiet = progress.Progress(RunPaths(tmp_path), writes=False)
    quiet.phase("imports")
    quiet.epoch(0, 10, 0, 1)()
    assert not RunPaths(tmp_path).progress.exists() and doing(RunPaths(tmp_path)) == ""
    said = {"doing": "epoch 3, step 40 of 200", "since": time.time() - 500, "at": time.time() - 90, "stepping": True}
    RunPaths(tmp_path).progress.write_text(json.dumps(said))
    assert doing(RunPaths(tmp_path)) == "epoch 3, step 40 of 200, said 90 s ago"  # a long step, or a stuck one
