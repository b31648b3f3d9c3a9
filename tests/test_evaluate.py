"""Evaluation on every device: 8 real processes × 1 CPU device each read their shards of the test set,
and score exactly what one device scores for the same parameters (step/evaluate.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, check_ok, dali_launch
from run_readers import only_run

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

# The run's last checkpoint (its parameters after epoch 0) evaluated on one device, in a process of its
# own: the trainer's own Evaluator, restored through its own Checkpointer.
ONE_DEVICE = """
import json, sys
import jax, numpy as np
from dali_launch.trainer.config import TaskSpec, replaced
from dali_launch.trainer.data.decided import DataPlan
from dali_launch.trainer.plan import Plan, facts
from dali_launch.trainer.plan.eval import EvalPlan
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.resilience.checkpoint import Checkpointer, zero_tally
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.step.initial_state import Made, create_train_state
from dali_launch.trainer.step.evaluate import Evaluator

spec = TaskSpec.load(sys.argv[1])
spec = replaced(spec, eval_cache_mb=0)
paths = RunPaths(spec.run_dir)
fresh = create_train_state(spec, np.zeros((1, 784), np.float32), slots_per_epoch=1)
newest = saved.newest(paths)
state, _ = Checkpointer(paths, 3).restore(newest.step, fresh, zero_tally(newest.metrics))
data = DataPlan(spec.data, decoder="cpu", reader_threads=2, readers_per_device=1, output_dtype="float32")
plan = Plan("cpu", data, None, EvalPlan(25, 1, True))  # the job's 25 rows a device
evaluator = Evaluator(spec, facts.alone(jax.local_devices()[:1]), plan, Made.of(spec))
summary, count, _ = evaluator(state.variables())
print(json.dumps({"accuracy": summary["accuracy"], "count": count, "devices": evaluator.eval_devices}))
"""


def test_four_processes_of_two_devices_evaluate_on_all_eight_as_one_device_does(small_lmdb, tmp_path):
    """200 test samples, 25 per device: each of the 8 devices, 2 in each of 4 processes, reads its own shard;
    process 0 reports the sum. Both evaluations run the same program (25 rows on one device), so the counts are
    equal. (Eight processes of one device took 25 s here, these four 14 s, one after the other: each process imports
    for ~1.5 s.)"""
    job = ["--local", "--processes", "4", "--gpus-per-node", "8", "--platform", "cpu", "--init-timeout-s", "120"]
    check_ok(
        dali_launch(
            *job,
            "--epochs",
            "1",
            "--eval-batch-size",
            "25",
            "--data-dir",
            str(small_lmdb),
            "--run-root",
            str(tmp_path),
            timeout=300,
        )
    )
    paths = only_run(tmp_path)
    [epoch] = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    assert epoch["eval_devices"] == 8 and epoch["test_count"] == 200, epoch
    one = subprocess.run(
        [sys.executable, "-c", ONE_DEVICE, str(paths.root)], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert one.returncode == 0, one.stderr[-3000:]
    alone = json.loads(one.stdout.strip().splitlines()[-1])
    assert alone["devices"] == 1 and alone["count"] == 200, alone
    assert alone["accuracy"] == epoch["test_accuracy"], (alone, epoch)
    assert 0.2 < alone["accuracy"] < 1.0  # trained, and not a constant
