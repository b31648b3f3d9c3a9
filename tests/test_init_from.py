"""--init-from (trainer/model/init_from.py): which variables a fine-tuning run loads, re-initialises and
ignores; where each kind of PATH leads; only parameters and BatchNorm statistics are read, from our
checkpoints and from Orbax trees of one's own. The end-to-end run is in test_vision_recipes.py; the
refusals before anything is written in test_catalogue_recipes.py."""

from __future__ import annotations

import json

import numpy as np
import orbax.checkpoint as ocp
import pytest

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model import init_from

MODEL = {"params/body/kernel": (8, 16), "params/head/kernel": (16, 3), "params/head/bias": (3,), "params/cls": (1, 16)}


def test_the_plan_loads_same_shapes_and_renews_a_head_of_another_width():
    found = {"params/body/kernel": (8, 16), "params/head/kernel": (16, 10), "params/head/bias": (10,)}
    found |= {"params/pre_logits/kernel": (16, 16)}
    plan = init_from.plan(MODEL, found, 3, "RUN", "vit-ti16")
    assert plan.loaded == ["params/body/kernel"]
    assert plan.reinitialised == ["params/cls", "params/head/bias", "params/head/kernel"]  # missing, and the head
    assert plan.ignored == ["params/pre_logits/kernel"]
    source = init_from.Source(None, "RUN (its checkpoint 80)")
    assert plan.describe(source) == (
        "init from RUN (its checkpoint 80): loaded 1 variables; re-initialised 3 (params/cls, params/head/bias, "
        "params/head/kernel); ignored 1 (params/pre_logits/kernel)"
    )


def test_any_other_shape_is_refused_naming_the_first():
    found = {**MODEL, "params/body/kernel": (8, 32)}
    with pytest.raises(UsageError) as e:
        init_from.plan(MODEL, found, 3, "RUN", "vit-ti16")
    assert str(e.value) == (
        "--init-from RUN: params/body/kernel is (8, 32) there but (8, 16) in --model vit-ti16; start from a checkpoint "
        "of the same model (only a head of another --num-classes is re-initialised)"
    )


def save(path, tree):
    ocp.PyTreeCheckpointer().save(path, tree)
    return path


def test_only_variables_are_read_from_our_state_and_from_flax_variables(tmp_path):
    ones = lambda *shape: np.ones(shape, np.float32)
    ours = save(tmp_path / "STEP" / "state", {  # a TrainState as checkpoint.py saves it
        "params": {"head": {"kernel": ones(4, 3)}}, "collections": {"batch_stats": {"mean": ones(4)}},
        "opt_state": {"mu": {"head": {"kernel": ones(4, 3)}}}, "ema": {"params": {"head": {"kernel": ones(4, 3)}}},
        "step": np.zeros((), np.int32),
    })  # fmt: skip
    assert init_from.found_shapes(ours) == {"params/head/kernel": (4, 3), "batch_stats/mean": (4,)}
    values = init_from.load(ours, ["params/head/kernel", "batch_stats/mean"])
    assert sorted(values) == ["batch_stats/mean", "params/head/kernel"] and values["batch_stats/mean"].sum() == 4
    flax = save(tmp_path / "flax", {"params": {"w": ones(2)}, "batch_stats": {"var": ones(2)}})
    assert init_from.found_shapes(flax) == {"params/w": (2,), "batch_stats/var": (2,)}
    bare = save(tmp_path / "bare", {"Dense_0": {"kernel": ones(2, 2)}})  # the parameters alone
    assert init_from.found_shapes(bare) == {"params/Dense_0/kernel": (2, 2)}
    assert init_from.locate(str(tmp_path / "STEP")).tree == ours  # a checkpoints/STEP folder: its state
    assert init_from.locate(str(bare)).tree == bare


def test_a_run_directory_means_its_newest_complete_checkpoint(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for step, done in ((40, True), (80, True), (120, False)):  # 120: still being written
        folder = run / "checkpoints" / str(step)
        (folder / "meta").mkdir(parents=True)
        (folder / "meta" / "metadata").write_text(json.dumps({"epoch": 0, "calls_done": step, "dali": [[]]}))
        if done:
            (folder / "commit_success.txt").write_text("")
    source = init_from.locate(str(run))
    assert source.tree == run / "checkpoints" / "80" / "state" and source.label == f"{run} (its checkpoint 80)"
