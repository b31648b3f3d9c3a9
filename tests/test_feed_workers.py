"""--feed-workers: the global order's feed read in DALI's worker processes (a parallel external source),
where DALI numbers batches on from a restored checkpoint's iteration, as the Feed assumes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from nvidia.dali import fn, pipeline_def, types

from dali_launch.trainer.data.feed import Feed, pipeline_options, restored_iteration
from dali_launch.trainer.data.global_order import Layout
from dali_launch.trainer.plan.data import MAX_FEED_WORKERS, feed_workers


class Iterations:
    """A source that returns the iteration DALI asked for (a class: spawned workers import it)."""

    def __call__(self, info: types.BatchInfo):
        return [np.array([info.iteration], np.int64)] * 2


def _pipeline(workers: int, checkpoint: bytes | None = None):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, enable_checkpointing=True, checkpoint=checkpoint)
    def graph():
        return fn.external_source(
            source=Iterations(), batch=True, batch_info=True, parallel=workers > 0, dtype=types.INT64
        )

    pipe = graph(**({"py_num_workers": workers, "py_start_method": "spawn"} if workers else {}))
    pipe.build()
    return pipe


def _iterations(pipe, n: int) -> list[int]:
    return [int(np.asarray(pipe.run()[0].as_tensor())[0, 0]) for _ in range(n)]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_restored_pipeline_numbers_its_batches_on_from_the_checkpoint(workers):
    """DALI 2.4 restores `BatchInfo.iteration` (not 0) to the batches consumed before the checkpoint, whatever
    its workers had prefetched; `restored_iteration` reads that number from the checkpoint itself."""
    first = _pipeline(workers)
    assert _iterations(first, 3) == [0, 1, 2]
    checkpoint = first.checkpoint()
    assert restored_iteration(checkpoint) == 3 and restored_iteration(None) == 0
    assert _iterations(_pipeline(workers, checkpoint), 3) == [3, 4, 5]


class Numbered:
    """A record source whose sample i is the byte i (picklable, as a worker needs it)."""

    def __len__(self):
        return 50

    def read(self, index: int):
        return np.array([index], np.uint8), index % 10


def test_a_feed_depends_on_the_iteration_only_and_survives_pickling():
    """Batch 7 is the same whether asked first or after others, by the feed or a pickled copy of it (what a
    worker holds); a feed started at (epoch 1, call 2) with first_iteration 5 reads that call at iteration 5."""
    feed = Feed(seed=3, devices=2, batch=4, steps=2, readers=1, device=1, reader=0, source=Numbered())
    later = feed(types.BatchInfo(7, 0))[0]
    copy = pickle.loads(pickle.dumps(feed))
    assert [a.tobytes() for a in copy(types.BatchInfo(7, 0))[0]] == [a.tobytes() for a in later]
    calls = Layout(50, 2, 4, 2).calls_per_epoch()  # 4: 16 positions a call
    resumed = Feed(3, 2, 4, 2, 1, 1, 0, epoch=1, call=2, first_iteration=5, source=Numbered())
    assert [a.tobytes() for a in resumed(types.BatchInfo(5, 0))[0]] == [
        a.tobytes() for a in feed(types.BatchInfo(calls + 2, 0))[0]
    ]


def test_auto_workers_take_the_cores_the_pipelines_threads_leave():
    assert feed_workers(-1, "shards", 16, 1, 8) == 0 and feed_workers(3, "shards", 16, 1, 8) == 0
    assert feed_workers(-1, "global", 16, 1, 8) == MAX_FEED_WORKERS  # one H200 of a 16-core host
    assert feed_workers(-1, "global", 1, 1, 2) == 0  # CI's CPU devices: no core to spare
    assert feed_workers(2, "global", 1, 1, 2) == 2
    assert pipeline_options(None) == {} and pipeline_options(Feed(0, 1, 1, 1, 1, 0, 0)) == {}
    assert pipeline_options(Feed(0, 1, 1, 1, 1, 0, 0, workers=2)) == {"py_num_workers": 2, "py_start_method": "spawn"}
