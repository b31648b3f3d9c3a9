"""What training's pipelines gave, kept for their next start (trainer/data/batch_record.py): a pipeline the trainer
cannot foresee has its first call compiled beside its build from its second start on, and a record that does
not fit is passed over."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, check_ok, dali_launch
from plans import decided
from run_readers import only_run

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import batch_record
from dali_launch.trainer.data.expected import Expected

SAMPLE = {"images": {"shape": [784], "dtype": "float32"}, "labels": {"shape": [10], "dtype": "float32"}}
OUTPUTS = ("images", "labels")


def test_a_record_is_of_its_pipelines_settings_split_and_outputs(tmp_path):
    config = decided(DataConfig(pipeline="my_pipes:pipe", image_size=32))
    name = batch_record.key(config, str(tmp_path / "training"), OUTPUTS)
    assert name == batch_record.key(config, str(tmp_path / "training"), OUTPUTS)  # the same in every process
    others = [
        batch_record.key(
            decided(DataConfig(pipeline="my_pipes:pipe", image_size=64)), str(tmp_path / "training"), OUTPUTS
        ),
        batch_record.key(config, str(tmp_path / "other"), OUTPUTS),
        batch_record.key(config, str(tmp_path / "training"), ("view1", "view2", "labels")),
    ]
    assert name not in others and len(set(others)) == 3


def test_kept_read_back_and_turned_into_the_guess(tmp_path):
    places = batch_record.places(str(tmp_path / "run"), tmp_path / "shared", "k1")
    assert places == [tmp_path / "run" / "batch_shapes.json", tmp_path / "shared" / "batches" / "k1.json"]
    batch_record.write(places, "k1", SAMPLE, 8000)
    assert batch_record.read(places, "k1") == {"key": "k1", "sample": SAMPLE, "samples": 8000}
    assert batch_record.read(places, "k2") is None  # another pipeline's, settings' or split's
    assert batch_record.read(places[1:], "k1")["samples"] == 8000  # the next run's: the run root's alone
    guess = batch_record.expected(batch_record.read(places, "k1"), OUTPUTS, lambda n: n // 50, None)
    assert guess == Expected(SAMPLE, 160)


@pytest.mark.parametrize(
    "record, why",
    [
        (None, "none kept"),
        ({"key": "k", "sample": {"images": SAMPLE["images"]}, "samples": 8}, "another task's outputs"),
        ({"key": "k", "sample": {**SAMPLE, "images": {"shape": [-1], "dtype": "float32"}}, "samples": 8}, "a shape"),
        ({"key": "k", "sample": {**SAMPLE, "images": {"shape": [784], "dtype": "no"}}, "samples": 8}, "a dtype"),
        ({"sample": SAMPLE}, "no count: the pre-flight's, the split's count unknown"),
    ],
)
def test_a_record_that_does_not_fit_makes_no_guess(record, why):
    assert batch_record.expected(record, OUTPUTS, lambda n: n, None) is None, why


def test_the_pre_flights_record_without_a_key_is_taken_with_the_splits_count(tmp_path):
    path = tmp_path / "batch_shapes.json"
    path.write_text(json.dumps({"sample": SAMPLE}))  # what the launcher's pre-flight may write of one's own pipeline
    record = batch_record.read([path], "any")
    assert batch_record.expected(record, OUTPUTS, lambda n: n // 50, 800) == Expected(SAMPLE, 16)


@pytest.mark.slow
def test_ones_own_pipeline_compiles_its_first_call_ahead_from_its_second_run_on(small_lmdb, tmp_path):
    """Two runs of one run root with a pipeline of one's own: the first compiles on its first batch, the second on
    the record the first kept (the run root's compile cache), beside its pipelines' build."""
    common = ["train", "--data-dir", str(small_lmdb), "--epochs", "1", "--pipeline", "python_pipelines:noisy"]
    common += ["--learning-rate", "0.0001", "--compile-cache", str(tmp_path / "xla")]  # 0..255 inputs: a small rate
    for name in ("first", "second"):
        check_ok(dali_launch(*common, "--run-root", str(tmp_path / name), env={"PYTHONPATH": str(REPO / "tests")}))
    ranks = {name: json.loads(only_run(tmp_path / name).rank_map.read_text())[0] for name in ("first", "second")}
    assert ranks["first"]["resolved"]["first_call_compiled"] == "on the pipelines' first batch"
    assert ranks["second"]["resolved"]["first_call_compiled"] == "beside the pipelines' build"
