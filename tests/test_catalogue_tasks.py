"""The catalogue of bad inputs: a `--task package.module:name` (or a `--model`) of the user's own that fails on the
pipeline's shapes, refused by the launcher's preparation (launcher/route/task_check.py, trainer/step/dry_run.py)
with one line naming the part and where, before anything is written or started: a `headline` its summary does
not give, a `summary` that raises or returns no dict, a headline that is no number, a model that fails on one
sample. Each was a traceback after an epoch of training (or at the model's first call). catalogue.py says how an
entry runs; the module here is on sys.path as a user's would be on PYTHONPATH."""

from __future__ import annotations

import sys
import textwrap

import pytest
from catalogue import check_entry

BAD_TASKS = """
import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from dali_launch.trainer.tasks.classification import classification

base = classification(10)


def raises(sums):
    return sums["accuracy"] / sums["missing"]


def per_class(sums):
    return {"accuracy": sums["accuracy"] / sums["count"], "counts": sums["counts"]}


def evaluate_per_class(step, batch):
    return {**base.evaluate(step, batch), "counts": jnp.zeros(10)}


wrong_headline = dataclasses.replace(base, headline="acuracy")
raising_summary = dataclasses.replace(base, summary=raises)
no_dict = dataclasses.replace(base, summary=lambda sums: sums["accuracy"])
array_headline = dataclasses.replace(base, evaluate=evaluate_per_class, summary=per_class, headline="counts")


class Broken(nn.Module):
    num_classes: int = 10

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x) @ jnp.ones((3, 3))
"""


def line(text: str) -> str:
    """`bad_tasks.py line N`: where `text` stands in the module the entries import."""
    return f"bad_tasks.py line {textwrap.dedent(BAD_TASKS).splitlines().index(text) + 1}"


RAISES = line('    return sums["accuracy"] / sums["missing"]')
TASKS = [
    pytest.param(
        ["--task", "bad_tasks:wrong_headline"],
        "--task bad_tasks:wrong_headline: its headline 'acuracy' is not a value its summary gives (accuracy); name "
        "one of them",
        id="headline-not-in-the-summary",
    ),
    pytest.param(
        ["--task", "bad_tasks:raising_summary"],
        f"--task bad_tasks:raising_summary: its summary failed on sums of its evaluation's shapes "
        f"({RAISES}: KeyError: 'missing'); fix the summary",
        id="summary-raises",
    ),
    pytest.param(
        ["--task", "bad_tasks:no_dict"],
        "--task bad_tasks:no_dict: its summary returned float; return a dict, {{name: value}}",
        id="summary-no-dict",
    ),
    pytest.param(
        ["--task", "bad_tasks:array_headline"],
        "--task bad_tasks:array_headline: its headline 'counts' is an array of shape (10,), not a number; headline "
        "one of the numbers its summary gives",
        id="headline-an-array",
    ),
    pytest.param(
        ["--model", "bad_tasks:Broken"],
        f"--model bad_tasks:Broken failed on one sample of shape (1, 784) "
        f"({line('        return nn.Dense(self.num_classes)(x) @ jnp.ones((3, 3))')}: TypeError: dot_general "
        "requires contracting dimensions to have the same shape, got (10,) and (3,).); make it take the pipeline's "
        "images",
        id="linen-model-fails-on-a-sample",
    ),
]


@pytest.fixture(scope="module")
def bad_tasks(tmp_path_factory):
    """bad_tasks.py in a folder of its own, outside the folder an entry must leave as it was."""
    root = tmp_path_factory.mktemp("bad-tasks")
    (root / "bad_tasks.py").write_text(textwrap.dedent(BAD_TASKS))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    sys.modules.pop("bad_tasks", None)


@pytest.mark.parametrize("args, message", TASKS)
def test_tasks(capsys, place, nothing_starts, bad_tasks, args, message):
    check_entry(capsys, place, ["train", *args, "--data-dir", "{data}", "--run-root", "{root}"], message)
