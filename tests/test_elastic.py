"""Elastic resume in either sample order, each training sample seen once per epoch.

The default order (shards, no flag): a run cut mid-epoch on 2 processes × 1 device resumes as 1 × 1 (the
rest of the epoch read by the old pipelines on one device, the same steps: the uninterrupted run's
parameters at the epoch's end) or grows to 3 × 1 with --elastic-batch rescale (a process hosting no old
pipeline, the rate × 1.5). --sample-order global: a run cut on 2 processes × 2 devices continues on
1 × 3 or 2 × 2 to the uninterrupted run's parameters (or, rescaled, at the rescaled learning rate).

The arithmetic (global_order.py, elastic.py here; hosting.py in test_hosting.py) is tested directly; the
runs are real local jobs on small_lmdb (800 samples, 7 calls of a global batch of 120 an epoch, the last
one part padding). The refusals (a batch that cannot be kept or rescaled, another data set) are in
test_catalogue_resume.py.
"""

from __future__ import annotations

import json
import shutil
import textwrap

import jax
import numpy as np
import pytest
from catalogue import ORDER_KEYS
from conftest import check_ok, dali_launch
from run_readers import assert_same_params, only_run, seen_prints, start_point_without_jax

from dali_launch.trainer.data.global_order import Layout, permutation
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import elastic, saved
from dali_launch.trainer.resilience.checkpoint import Checkpointer
from dali_launch.trainer.run_dir import RunPaths


def test_the_order_depends_on_seed_and_epoch_only():
    assert np.array_equal(permutation(0, 1, 800), permutation(0, 1, 800))
    assert not np.array_equal(permutation(0, 1, 800), permutation(0, 2, 800))
    assert not np.array_equal(permutation(0, 1, 800), permutation(1, 1, 800))
    assert sorted(permutation(3, 0, 800)) == list(range(800))


@pytest.mark.parametrize("devices, readers, steps", [(1, 1, 1), (3, 1, 1), (4, 2, 3), (2, 4, 2)])
def test_each_step_reads_its_own_range_of_the_order_on_any_topology(devices, readers, steps):
    """Step s holds positions [s*B, (s+1)*B) whatever D, R and --steps-per-call; an epoch covers 0..N-1 once."""
    layout = Layout(num_samples=800, devices=devices, batch=120 // devices, steps=steps, readers=readers)
    seen = []
    for call in range(layout.calls_per_epoch()):
        start = call * layout.call_samples
        rows = np.stack(
            [np.concatenate([layout.positions(start, d, r) for r in range(readers)]) for d in range(devices)]
        )
        # parallel.sample_order's view: row i*R + r of a device is its reader r's i-th row
        ordered = rows.reshape(devices, readers, -1).swapaxes(1, 2).reshape(devices, steps, -1)
        for j in range(steps):
            step = np.sort(ordered[:, j].reshape(-1))
            first = (call * steps + j) * 120
            assert np.array_equal(step, np.arange(first, first + 120))
        valid = np.stack([layout.valid(start, d) for d in range(devices)])
        assert np.array_equal(valid > 0, rows < 800)
        seen += rows[rows < 800].tolist()
    assert sorted(seen) == list(range(800))


def test_keeping_the_global_batch_needs_a_device_count_that_divides_it():
    order = {"devices": 4, "global_batch": 120, "steps_per_call": 1}
    plan = elastic.plan(order, 3, "keep")
    assert (plan.batch_per_device_step, plan.lr_scale, plan.changed) == (40, 1.0, True)
    with pytest.raises(UsageError, match=r"global batch 120 cannot be split over 7 devices; .*\(1, 2, 3, 4, 5, 6, 8, "):
        elastic.plan(order, 7, "keep")


def test_rescaling_keeps_the_per_device_batch_and_scales_the_rate_linearly():
    plan = elastic.plan({"devices": 4, "global_batch": 120, "steps_per_call": 2}, 7, "rescale")
    assert (plan.batch_per_device_step, plan.global_batch, plan.steps_per_call) == (30, 210, 2)
    assert plan.lr_scale == pytest.approx(210 / 120)
    again = elastic.plan(
        {"devices": 7, "global_batch": 210, "first_global_batch": 120, "steps_per_call": 2}, 2, "rescale"
    )
    assert again.lr_scale == pytest.approx(60 / 120)  # always against the run's first global batch


def test_accumulated_steps_are_not_rescaled():
    """An update of --accumulate-steps 2 is one step of 2 × 120 samples: rescaled, no exact rule; kept, exact."""
    order = {"devices": 4, "global_batch": 120, "steps_per_call": 1}
    with pytest.raises(UsageError, match=r"^--elastic-batch rescale cannot continue --accumulate-steps 2 on 3 dev"):
        elastic.plan(order, 3, "rescale", accumulate_steps=2)
    assert elastic.plan(order, 3, "keep", accumulate_steps=2).batch_per_device_step == 40
    assert elastic.plan(order, 4, "rescale", accumulate_steps=2).lr_scale == 1.0  # the same devices: nothing changes


def test_checkpoints_in_trailing_padding_calls_get_new_step_numbers(tmp_path):
    """Resumed with another global batch, an epoch may end in calls past its last sample: the step their
    checkpoints ask for is the same (N samples), but each is numbered anew, and the newest is the one resumed."""
    checkpointer = Checkpointer(RunPaths(tmp_path), keep=3)
    tally = {"position": jax.device_put(np.zeros((1,), np.int32))}
    for calls_done in (8, 9):
        position = {"epoch": 0, "calls_done": calls_done, "order": {"position": 800}}
        checkpointer.save(800, {"w": np.zeros(2, np.float32)}, tally, [], position)
    checkpointer.wait()  # written in the background
    assert checkpointer.manager.all_steps() == [800, 801]
    assert saved.newest(RunPaths(tmp_path)).calls_done == 9  # what every task starts from (start_point.read)


STOPPER = """
import os
import signal

import flax.linen as nn
import jax

_seen = {"steps": 0}


def _stop_rank_0(x):
    # SIGTERM to rank 0 at a fixed step: every rank agrees at the next sync point, checkpoints and stops.
    _seen["steps"] += 1
    if jax.process_index() == 0 and _seen["steps"] == int(os.environ.get("STOP_AT", "0")):
        os.kill(os.getpid(), signal.SIGTERM)


class Small(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        jax.debug.callback(_stop_rank_0, x[0, 0])
        x = nn.relu(nn.Dense(64)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.num_classes)(x)


def small(num_classes):
    return Small(num_classes=num_classes)
"""
COMMON = ["--epochs", "2", "--global-batch-size", "120", "--record-samples"]
COMMON += [
    "--sync-every-steps",
    "1",
    "--checkpoint-every-steps",
    "0",
    "--init-timeout-s",
    "30",
    "--model",
    "stopper:small",
]


def _cut_and_whole(root, small_lmdb, layout: list[str], flags: list[str], stop_at: int):
    """An uninterrupted run and one stopped by SIGTERM in epoch 0 (once rank 0's model ran `stop_at` times),
    on a copy of small_lmdb: (whole, cut, env)."""
    (root / "pkg").mkdir()
    (root / "pkg" / "stopper.py").write_text(textwrap.dedent(STOPPER))
    data = root / "data"
    shutil.copytree(small_lmdb, data)
    env = {"PYTHONPATH": str(root / "pkg")}
    args = ["--local", *layout, "--data-dir", str(data), *COMMON]
    check_ok(dali_launch(*args, "--run-root", str(root / "whole"), env=env))
    cut = dali_launch(*args, *flags, "--run-root", str(root / "cut"), env={**env, "STOP_AT": str(stop_at)})
    assert cut.returncode != 0 and "checkpoint written" in cut.stderr, cut.stderr
    paths = only_run(root / "cut")
    assert not paths.result.exists()
    assert json.loads(next(paths.checkpoints.glob("*/meta/metadata")).read_text())["calls_done"] > 0
    return only_run(root / "whole"), paths, env


@pytest.fixture(scope="module")
def runs(small_lmdb, tmp_path_factory):
    """--sample-order global on 2 × 2: an uninterrupted run, and one stopped in epoch 0."""
    root = tmp_path_factory.mktemp("elastic")
    # The cut run (and so its resumptions) reads in DALI workers, the whole one in-process: same samples.
    layout, flags = ["--gpus-per-node", "4", "--processes", "2", "--sample-order", "global"], ["--feed-workers", "1"]
    whole, cut, env = _cut_and_whole(root, small_lmdb, layout, flags, stop_at=6)  # 2 devices a process: step 3
    # The catalogue's elastic refusals (test_catalogue_resume.py) fake a checkpoint with this record.
    assert sorted(saved.newest(cut).order) == sorted(ORDER_KEYS)
    return root, whole, cut, env


@pytest.fixture(scope="module")
def shard_runs(small_lmdb, tmp_path_factory):
    """The default order (no --sample-order) on 2 processes × 1 device: an uninterrupted run, one stopped in epoch 0."""
    root = tmp_path_factory.mktemp("elastic-shards")
    whole, cut, env = _cut_and_whole(root, small_lmdb, ["--gpus-per-node", "2", "--processes", "2"], [], stop_at=3)
    record = saved.newest(cut).shards
    assert (record["reading"], record["shard_ids"]) == (
        {"devices": 2, "readers": 1, "batch": 60, "steps": 1},
        [[0], [1]],
    )
    return whole, cut, env


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_trained_runs_start_point_is_read_without_jax(runs):
    """The cut run's real checkpoint, as --resume on 1 process × 3 devices and that job's tasks read it
    (start_point.py): 3 devices keep the global batch of 120, the calls of 120 before its position are done."""
    _, _, cut, _ = runs
    position = saved.newest(cut).order["position"]
    assert start_point_without_jax(cut.root, processes=1, devices=3) == {
        "step": saved.newest(cut).step,
        "calls": position // 120,
        "offset": position % 120,
        "plan": "elastic resume: 4 -> 3 devices, global batch 120 kept (40 per device), learning rate unchanged",
        "heavy": [],
    }


def _each_sample_once(moved: RunPaths, whole: RunPaths) -> None:
    for epoch in range(2):
        prints = seen_prints(moved, epoch)
        assert sum(prints.values()) == 800 and max(prints.values()) == 1, epoch  # none lost, none repeated
        assert prints == seen_prints(whole, epoch)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "processes, per_process, rule",
    [(2, 2, "keep"), (1, 3, "keep"), (1, 3, "rescale")],
    ids=["2x2", "1x3", "1x3-rescale"],
)
def test_a_cut_run_resumes_on_another_topology_each_sample_once(runs, tmp_path, processes, per_process, rule):
    _, whole, cut, env = runs
    moved = RunPaths(shutil.copytree(cut.root, tmp_path / cut.root.name))
    topology = ["--gpus-per-node", str(processes * per_process), "--processes", str(processes)]
    resumed = dali_launch("--resume", str(moved.root), *topology, "--elastic-batch", rule, env=env)
    check_ok(resumed)
    _each_sample_once(moved, whole)
    if (processes, per_process) == (2, 2):  # the same program: bit-identical
        assert json.loads(moved.result.read_text())["checksums"] == json.loads(whole.result.read_text())["checksums"]
    elif rule == "keep":
        assert "global batch 120 kept" in resumed.stdout
        assert json.loads(moved.elastic.read_text())["batch_per_device_step"] == 120 // (processes * per_process)
        assert_same_params(moved, whole)  # 14 steps of another XLA program: conftest's tolerance
    else:
        _check_rescaled(moved, cut, resumed.stdout)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_default_order_resumes_on_one_device_each_sample_once(shard_runs, tmp_path):
    """2 × 1 cut mid-epoch, resumed as 1 × 1 with no sample-order flag: the rest of epoch 0 is the two old
    pipelines' on one device (120 a step, the old steps), so epoch 0 ends with the uninterrupted run's
    parameters; epoch 1 reads the one device's own shard."""
    whole, cut, env = shard_runs
    moved = RunPaths(shutil.copytree(cut.root, tmp_path / cut.root.name))
    resumed = dali_launch("--resume", str(moved.root), "--gpus-per-node", "1", "--processes", "1", env=env)
    check_ok(resumed)
    assert "2 -> 1 devices, global batch 120 kept (120 per device)" in resumed.stdout, resumed.stdout
    assert (
        "the rest of epoch 0 reads its 2 shards' pipelines of 2 devices on 1 (120 per device a step" in resumed.stdout
    )
    _each_sample_once(moved, whole)
    (record,) = [json.loads(line) for line in moved.elastic.read_text().splitlines()]
    assert (record["remainder"]["slots"], record["batch_per_device_step"]) == (2, 120), record
    ranks = json.loads(moved.rank_map.read_text())
    assert [r["resolved"]["remainder"]["calls_done"] for r in ranks] == [
        saved.read(moved, record["checkpoint"]).calls_done
    ]
    assert_same_params(moved, whole, steps=(7, 7))  # epoch 0's end (7 calls): the same steps, another program


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_default_order_grows_to_three_processes_rescaled(shard_runs, tmp_path):
    """2 × 1 cut mid-epoch, resumed as 3 × 1 with --elastic-batch rescale: the old pipelines on devices 0 and
    1, device 2 (process 2) hosts none and steps on padding; 60 per device kept, the rate × 180/120."""
    whole, cut, env = shard_runs
    moved = RunPaths(shutil.copytree(cut.root, tmp_path / cut.root.name))
    topology = ["--gpus-per-node", "3", "--processes", "3", "--elastic-batch", "rescale"]
    resumed = dali_launch("--resume", str(moved.root), *topology, env=env)
    check_ok(resumed)
    assert "60 per device kept: global batch 180, learning rate x1.5 (180/120)" in resumed.stdout, resumed.stdout
    _each_sample_once(moved, whole)
    rates = [json.loads(line)["learning_rate"] for line in moved.metrics.read_text().splitlines()]
    assert rates == pytest.approx([0.1 * 1.5] * 2)
    # the next epoch starts at its own step count: 5 calls of 180 (800 samples), whatever the rest took
    assert saved.newest(moved).step == 10 and saved.read(moved, 5).calls_done == 0


def _check_rescaled(moved: RunPaths, cut: RunPaths, stdout: str) -> None:
    """30 per device kept on 3 devices: global batch 90 from where the cut run stopped (600, 5 steps of 120:
    no whole number of steps of 90), the rate × 90/120, said, recorded in elastic.jsonl, and used by every
    epoch the resumed run finished."""
    assert "3 devices, 30 per device kept: global batch 90, learning rate x0.75 (90/120)" in stdout, stdout
    (record,) = [json.loads(line) for line in moved.elastic.read_text().splitlines()]
    assert (record["rule"], record["global_batch"], record["lr_scale"]) == ("rescale", 90, 0.75)
    assert record["position"] == saved.newest(cut).order["position"] and record["position"] % 90, record
    rates = [json.loads(line)["learning_rate"] for line in moved.metrics.read_text().splitlines()]
    assert rates == pytest.approx([0.1 * 0.75] * 2)
