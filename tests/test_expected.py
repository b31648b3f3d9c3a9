"""The batch training's pipelines are expected to give, known before they are built (trainer/data/expected.py):
for every built-in format, in either sample order and output dtype, with a bad sample left out, exactly what
its pipelines then give (one sample of each output, an epoch's device calls, the call's arrays), so the first
device call compiles beside their build (set_up.py). That the first call then finds that program:
test_compile_cache.py's cold run."""

from __future__ import annotations

from functools import partial

import jax
import pytest
from catalogue import NOT_AN_IMAGE, dataset, good_records, replace_image, synth_set
from plans import decided

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import dali, expected, formats, shards
from dali_launch.trainer.data.batches import Readers, calls_per_epoch
from dali_launch.trainer.data.contract import OUTPUTS
from dali_launch.trainer.data.expected import Expected
from dali_launch.trainer.tasks.classification import classification
from dali_launch.trainer.tasks.contract import Task


def _split(tmp_path, found: formats.Format, spoilt: bool) -> str:
    """A small training split of `found` (6 samples; the second one not an image when `spoilt`)."""
    if found.writer:
        spoil = lambda root: replace_image(root / "training", found.name, 1, lambda jpeg: NOT_AN_IMAGE)
        return str(synth_set(found.name, spoil if spoilt else None)(tmp_path)["data"] / "training")
    return str(dataset(tmp_path, training=good_records(6))["data"] / "training")


CASES = [("shards", "float32", False), ("global", "float16", False), ("shards", "float32", True)]  # True: spoilt
# The classification formats: a pipeline of another task's outputs is not guessed (guess: None), it is built first
CLASSIFYING = [f for f in formats.FORMATS if f.outputs == OUTPUTS]


@pytest.mark.parametrize(
    "found, order, dtype, spoilt",
    [(f, *case) for f in CLASSIFYING for case in CASES if f.skips or not case[2]],  # skip: refused for LMDBs
    ids=lambda v: v.name if isinstance(v, formats.Format) else str(v),
)
def test_every_built_in_format_gives_the_batch_expected_of_it(tmp_path, monkeypatch, found, order, dtype, spoilt):
    """One reader of batch 1 on one CPU device: an epoch's calls are its samples, so one left out shows."""
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    split, devices = _split(tmp_path, found, spoilt), jax.local_devices(backend="cpu")[:1]
    config = DataConfig(
        pipeline=found.name,
        decoder="cpu",
        reader_threads=1,
        output_dtype=dtype,
        image_size=32,
        bad_samples="skip",
        max_bad_samples="1",
    )
    sharding, start = shards.Sharding(0, 1, 1, 1), dali.Start(order, 0, 1, 1, 1)
    calls = partial(calls_per_epoch, sharding=sharding, reader_batch=1, start=start)
    guess = expected.guess(decided(config), split, calls, classification())
    data = dali.build(dali.Split(split, True, 1), Readers(devices, devices, sharding), decided(config), start=start)
    assert guess == Expected(data.sample_spec(), data.steps) and data.steps == 6 - spoilt
    abstract = lambda x: (x.shape, x.dtype, x.sharding)
    assert jax.tree.map(abstract, guess.batch(data.sharding_spec, 1)) == jax.tree.map(abstract, data.peek())
    example, first = guess.example("images"), data.first_sample("images")
    assert (example.shape, example.dtype) == (first.shape, first.dtype)


OTHERS = [f.name for f in formats.FORMATS if f.outputs != OUTPUTS] + [r.name for r in formats.READINGS]


@pytest.mark.parametrize("pipeline", OTHERS)
def test_every_built_in_pipeline_of_another_task_gives_what_is_expected_of_it(tmp_path, monkeypatch, pipeline):
    """The pipelines of the other built-in tasks (segmentation's masks, detection's boxes, video's clips of
    --clip-frames frames, the contrastive views) give one sample of each output as samples.py describes it."""
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    found = formats.get(pipeline)
    split, devices = str(synth_set(found.name)(tmp_path)["data"] / "training"), jax.local_devices(backend="cpu")[:1]
    config = DataConfig(pipeline=pipeline, decoder="cpu", reader_threads=1, output_dtype="float32", image_size=32)
    names = formats.reading(pipeline).outputs if formats.reading(pipeline) else found.outputs
    sharding, start = shards.Sharding(0, 1, 1, 1), dali.Start("shards", 0, 1, 1, 1)
    calls = partial(calls_per_epoch, sharding=sharding, reader_batch=1, start=start)
    guess = expected.guess(decided(config), split, calls, Task(names, None, None))
    data = dali.build(
        dali.Split(split, True, 1, outputs=names), Readers(devices, devices, sharding), decided(config), start=start
    )
    assert guess == Expected(data.sample_spec(), data.steps)


def test_a_pipeline_of_ones_own_is_not_guessed(tmp_path):
    """Only the task knows what it gives: its pipelines' first batch decides, as before."""
    assert (
        expected.guess(decided(DataConfig(pipeline="my_pipes:pipeline")), str(tmp_path), lambda n: n, classification())
        is None
    )
