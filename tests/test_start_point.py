"""Where a task starts (trainer/resilience/start_point.py): read from a run directory without JAX, by the
launcher's --resume (check_resume) and by every task (read) alike.

Run directories are made as the launcher makes them (catalogue.global_order_run: a --sample-order global
run whose newest checkpoint is at position 360 of 800, global batch 120 on 2 processes × 2 devices); the
trained ones are in test_elastic.py and test_resilience.py. The catalogue's refusals are in
test_catalogue_resume.py.
"""

from __future__ import annotations

import json

import pytest
from catalogue import dataset, global_order_run
from run_readers import start_point_without_jax

from dali_launch.trainer.config import TaskSpec, replaced
from dali_launch.trainer.data.hosting import Remainder, ShardLayout
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import start_point
from dali_launch.trainer.resilience.start_point import StartPoint
from dali_launch.trainer.run_dir import RunPaths


@pytest.fixture
def global_run(tmp_path) -> RunPaths:
    return RunPaths(global_order_run(tmp_path, dataset(tmp_path)["data"]))


def test_a_start_point_is_read_without_jax(global_run):
    """What the launcher's --resume and a task read of a run directory imports neither JAX nor Orbax
    (a trained run's: test_elastic.py)."""
    # 3 devices keep the global batch of 120 (40 each); position 360 is 3 calls of 120 into the epoch
    assert start_point_without_jax(global_run.root, processes=1, devices=3) == {
        "step": 360,
        "calls": 3,
        "offset": 0,
        "plan": "elastic resume: 4 -> 3 devices, global batch 120 kept (40 per device), learning rate unchanged",
        "heavy": [],
    }


def test_a_run_without_a_checkpoint_starts_fresh(tmp_path):
    paths, spec = RunPaths(tmp_path), TaskSpec(run_dir=str(tmp_path))
    assert start_point.read(paths, spec, 0, 1, 1) == StartPoint.fresh() == StartPoint()
    assert start_point.check_resume(paths, spec, [1], [1]) == ""
    assert StartPoint.fresh().pipeline_states((0, 1), LAYOUT) is None and StartPoint.fresh().rebased_slot(10) is None
    assert StartPoint.fresh().remainder(LAYOUT, "keep") is None


def test_a_global_order_continues_on_another_layout(global_run):
    """Rescaled to 30 per device on 3 devices: 360 is 4 calls of 90 into the epoch; the pipelines (2
    processes wrote it, 1 reads it) start afresh; the schedule is re-based on the new epoch length."""
    spec = TaskSpec.load(global_run.root)
    spec = replaced(spec, elastic_batch="rescale")
    start = start_point.read(global_run, spec, process_id=0, processes=1, devices=3)
    assert (start.step, start.epoch, start.calls_done, start.offset) == (360, 0, 4, 0)
    assert (start.plan.global_batch, start.plan.batch_per_device_step, start.first_global_batch) == (90, 30, 120)
    assert start.dali is None and start.pipeline_states((0, 1, 2), LAYOUT) is None
    assert start.rebased_slot(slots_per_epoch=9) == 4  # ceil(360 / 90) SGD steps into epoch 0
    same = start_point.read(global_run, TaskSpec.load(global_run.root), process_id=1, processes=2, devices=4)
    assert (same.calls_done, same.dali, same.rebased_slot(7)) == (3, (), None)  # the same layout: nothing changes
    assert start_point.check_resume(global_run, TaskSpec.load(global_run.root), [4], [2]) == ""


def test_a_global_order_under_a_node_range_checks_every_count(global_run):
    """SLURM picks the count at each start: every count must continue, and none is described."""
    spec = TaskSpec.load(global_run.root)
    assert start_point.check_resume(global_run, spec, [4, 8], [2, 4]) == ""
    with pytest.raises(UsageError, match=r"^the run's global batch 120 cannot be split over 7 devices"):
        start_point.check_resume(global_run, spec, [4, 7], [2])


LAYOUT = ShardLayout(devices=2, readers=2, batch=30, steps=1)  # 4 pipelines of 30 a call


def _shard_order(run: RunPaths, record: dict | None) -> None:
    """The run's checkpoint as shard order writes it: 2 processes' 2 pipelines each (states 0..3), with
    `record` (checkpoint.shard_record; None: as an earlier version wrote it, without one)."""
    meta_file = next(run.checkpoints.glob("*/meta/metadata"))
    meta = json.loads(meta_file.read_text())
    meta = {**meta, "order": None, "dali": [["AA==", "AQ=="], ["Ag==", "Aw=="]]}
    meta_file.write_text(json.dumps({**meta, "shards": record} if record else meta))


def test_a_shard_order_record_continues_on_any_layout(global_run):
    """Every pipeline's state by shard id: the layout that wrote it goes on whatever the processes (1 × 2 here);
    another layout starts afresh at the next epoch and reads the rest of this one with the old pipelines."""
    order = json.loads(next(global_run.checkpoints.glob("*/meta/metadata")).read_text())["order"]
    record = {**order, "devices": 2, "global_batch": 60, "first_global_batch": 60, "position": 360}
    _shard_order(global_run, {**record, "reading": LAYOUT.as_dict(), "shard_ids": [[0, 1], [2, 3]]})
    spec = TaskSpec.load(global_run.root)
    start = start_point.read(global_run, spec, process_id=0, processes=1, devices=2)
    assert (start.calls_done, start.plan.changed, start.states) == (3, False, {0: b"\0", 1: b"\1", 2: b"\2", 3: b"\3"})
    assert start.pipeline_states((0, 1, 2, 3), LAYOUT) == [b"\0", b"\1", b"\2", b"\3"]
    assert start.remainder(LAYOUT, "keep") is None
    one = start_point.read(global_run, spec, process_id=0, processes=1, devices=1)
    assert (one.plan.batch_per_device_step, one.plan.describe()[:32]) == (60, "elastic resume: 2 -> 1 devices, ")
    mine = ShardLayout(devices=1, readers=1, batch=60, steps=1)
    assert one.pipeline_states((0,), mine) is None  # afresh, at the next epoch
    assert one.remainder(mine, "keep") == Remainder(LAYOUT, 1, "keep", calls_done=3)
    assert start_point.check_resume(global_run, spec, [1], [1]).startswith("elastic resume: 2 -> 1 devices")


def test_a_shard_order_checkpoint_of_an_earlier_version_continues_only_on_its_own_layout(global_run):
    """Without a record, each process's DALI readers restore their own positions: other processes, or other
    pipelines, are refused."""
    _shard_order(global_run, None)
    spec = TaskSpec.load(global_run.root)
    message = r"^checkpoint step 360 was written by 2 processes, this job has 3; resume with the run's own --nodes"
    with pytest.raises(UsageError, match=message):
        start_point.read(global_run, spec, 0, 3, 3)
    with pytest.raises(UsageError, match=message):
        start_point.check_resume(global_run, spec, [3], [3])
    start = start_point.read(global_run, spec, process_id=1, processes=2, devices=4)
    assert (start.calls_done, start.dali, start.plan) == (3, (b"\x02", b"\x03"), None)
    assert start.pipeline_states((2, 3), LAYOUT) == [b"\x02", b"\x03"]
    assert not start_point.resizable(global_run)
    with pytest.raises(UsageError, match=r"^the checkpoint holds 2 DALI readers for this process but it has 4; "):
        start.pipeline_states((4, 5, 6, 7), LAYOUT)
