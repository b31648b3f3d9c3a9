"""A task's training metrics through kill -9 and --resume, and which way its headline improves.

A built-in task with training metrics (segmentation) and a task of one's own (BITS: a multi-label task whose
headline is an error) are trained uninterrupted, then again killed with SIGKILL just after a mid-epoch checkpoint
and resumed: every epoch reports the uninterrupted one's loss, samples and training metrics. Segmentation resumes
on the devices it was killed on (the same program: equal bit for bit); BITS, a small MLP quick to compile, on
another device count in either sample order, killed again there and resumed on another --mesh (other programs:
equal up to rounding). What a checkpoint keeps is the same list for every task (checkpoint.KEPT, and the task's
metric names: the fast test below), so detection's and contrastive's sums ride the same way; classification has
no training metrics: its loss is test_resilience.py's.
The runs are a few steps each, on conftest's small data sets.
"""

from __future__ import annotations

import json
import signal
import textwrap

import pytest
from conftest import REPO, check_ok, dali_launch, kill_when, start
from run_readers import has_checkpoint, only_run

from dali_launch.launcher.commands.runs import table
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.resilience.checkpoint import KEPT, Checkpointer, zero_tally
from dali_launch.trainer.run_dir import RunPaths, best, better
from dali_launch.trainer.tasks.contract import Task, better_of

BITS = '''
"""The four bits of the digit (a multi-label task) on the built-in mnist pipeline, read off the model's first
four outputs: a bit accuracy each as training metrics, the share of wrong bits as the headline."""

import jax.numpy as jnp
import optax

from dali_launch.trainer.data.contract import class_ids
from dali_launch.trainer.tasks.contract import Task


def _bits(batch):
    return (class_ids(batch["labels"])[:, None] >> jnp.arange(4)) & 1


def loss(step, batch):
    logits, bits = step.model(batch["images"])[:, :4], _bits(batch)
    right = ((logits > 0) == bits) * step.valid[:, None]
    errors = optax.sigmoid_binary_cross_entropy(logits, bits).mean(-1)
    return jnp.sum(errors * step.valid), {f"bit{i}": jnp.sum(right[:, i]) for i in range(4)}


def evaluate(step, batch):
    wrong = (step.model(batch["images"])[:, :4] > 0) != _bits(batch)
    return {"bit_error": jnp.sum(wrong.mean(-1) * step.valid)}


task = Task(
    outputs=("images", "labels"),
    loss=loss,
    evaluate=evaluate,
    metrics=("bit0", "bit1", "bit2", "bit3"),
    headline="bit_error",
    unit="images",
)
'''
BITS_ON_TWO = ["--task", "bits:task", "--gpus-per-node", "2"]
SEGMENTATION = ["--num-classes", "4", "--image-size", "32", "--global-batch-size", "8"]  # test_segmentation_runs'
SEGMENTATION += ["--optimizer", "adamw", "--learning-rate", "3e-3", "--checkpoint-every-steps", "10"]  # its program
ONE = [[]]  # resumed once, on its own devices: the same program
# case: its data (a fixture), the flags of every run of it, and what each resume adds (each but the last is
# killed in turn at its first checkpoint): segmentation on its own devices, BITS's (a small MLP, quick to
# compile) on another device count in either order, then on another mesh
CASES = {
    "bits-shards-2-to-1-device-to-fsdp-2": ("small_lmdb", BITS_ON_TWO, [["--gpus-per-node", "1"], ["--gpus-per-node", "2", "--mesh", "fsdp:2"]]),
    "bits-global-order-2-to-1-device": ("small_lmdb", [*BITS_ON_TWO, "--sample-order", "global"], [["--gpus-per-node", "1"]]),
    "segmentation": ("segmentation_set", ["--task", "segmentation", *SEGMENTATION], ONE),
}  # fmt: skip
GLOBAL = "bits-global-order-2-to-1-device"  # its uninterrupted run is `runs`' too


@pytest.fixture(scope="module")
def code(tmp_path_factory):
    """The folder BITS is saved in, as bits.py (on PYTHONPATH for every run here)."""
    folder = tmp_path_factory.mktemp("code")
    (folder / "bits.py").write_text(textwrap.dedent(BITS))
    return folder


def _data(request, name: str):
    return request.getfixturevalue(name)


def _train(request, case: str, root, epochs: int = 1) -> list[str]:
    """The arguments of a run of `case` under `root`: a checkpoint every 2 steps, where the case does not say."""
    fixture, flags, _ = CASES[case]
    every = [] if "--checkpoint-every-steps" in flags else ["--checkpoint-every-steps", "2"]
    data = ["--data-dir", str(_data(request, fixture)), "--epochs", str(epochs), *every]
    return ["train", *flags, *data, "--run-root", str(root)]


@pytest.fixture(scope="module")
def bits_run(code, request, tmp_path_factory):
    """BITS trained uninterrupted for 2 epochs on 2 devices, --sample-order global."""
    root = tmp_path_factory.mktemp("bits")
    check_ok(dali_launch(*_train(request, GLOBAL, root, epochs=2), env={"PYTHONPATH": str(code)}))
    return only_run(root)


def _epochs(paths) -> list[dict]:
    return [json.loads(line) for line in paths.metrics.read_text().splitlines()]


def _trained(epoch: dict) -> dict:
    """What an epoch line says of training: the loss, the samples and every training metric."""
    return {k: v for k, v in epoch.items() if k.startswith("train_")}


def _newest(paths) -> tuple[int, int]:
    """The step of a run's newest checkpoint and its device calls into its epoch ((-1, 0) while it has none)."""
    newest = saved.newest(paths) if paths.checkpoints.is_dir() else None
    return (newest.step, newest.calls_done) if newest else (-1, 0)


def _kill_at_a_new_checkpoint(proc, paths) -> None:
    """SIGKILL `proc` the moment the run at `paths` has a checkpoint newer than it had; it was mid-epoch."""
    before = _newest(paths)[0]
    kill_when(proc, lambda: paths.root.is_dir() and _newest(paths)[0] != before, timeout_s=300)
    assert proc.returncode == -signal.SIGKILL and _newest(paths)[1] > 0, _newest(paths)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_resumed_epoch_reports_the_uninterrupted_epochs_training_metrics(case, code, request, tmp_path):
    env, resumes = {"PYTHONPATH": str(code)}, CASES[case][2]
    epochs = 2 if case.startswith("bits") else 1  # BITS's: the kills fall in either epoch
    if case == GLOBAL:
        whole = request.getfixturevalue("bits_run")
    else:
        check_ok(dali_launch(*_train(request, case, tmp_path / "whole", epochs), env=env))
        whole = only_run(tmp_path / "whole")
    proc = start(*_train(request, case, tmp_path / "cut", epochs), env=env)
    kill_when(proc, lambda: has_checkpoint(tmp_path / "cut"), timeout_s=300)
    cut = only_run(tmp_path / "cut")
    assert proc.returncode == -signal.SIGKILL and _newest(cut)[1] > 0  # killed mid-epoch
    for flags in resumes[:-1]:
        _kill_at_a_new_checkpoint(start("--resume", str(cut.root), *flags, env=env), cut)
    resumed = dali_launch("--resume", str(cut.root), *resumes[-1], env=env)
    check_ok(resumed)
    assert "resumed from checkpoint" in resumed.stdout and "cover the samples" not in resumed.stdout
    expected, got = [_trained(e) for e in _epochs(whole)], [_trained(e) for e in _epochs(cut)]
    assert len(got) == epochs and len(expected[0]) > 2, got  # the loss, the samples and the task's metrics
    if resumes == ONE:  # the same program: the same bits
        assert got == expected
    else:  # other programs: rounding may move a metric by a sample or two
        assert got == [pytest.approx(e, rel=1e-4, abs=0.006) for e in expected]


# --- what a checkpoint keeps of the tally ----------------------------------------------------------


def test_a_checkpoint_keeps_the_metric_sums_by_name_and_an_earlier_versions_restores_without_them(tmp_path):
    """The sums restore into a tally of their names (saved.Saved.metrics); tests/golden/old-run's checkpoint,
    written before checkpoints kept them, names none and restores as it was written."""
    import jax
    import numpy as np

    tally = zero_tally(("bit0", "bit1")) | {"skipped": np.zeros((), np.float32)}  # what calls carry is not all kept
    tally["metrics"]["bit1"] = np.full((), 7.5, np.float32)
    checkpointer = Checkpointer(RunPaths(tmp_path), keep=1, asynchronous=False)
    state = {"w": np.ones(2, np.float32)}
    kept = jax.tree.map(
        lambda x: jax.device_put(x[None]), {k: v for k, v in tally.items() if k in KEPT}
    )  # a row a device
    checkpointer.save(3, state, kept, [], {"epoch": 0, "calls_done": 3})
    assert saved.read(RunPaths(tmp_path), 3).metrics == ("bit0", "bit1")
    _, restored = checkpointer.restore(3, state, zero_tally(("bit0", "bit1")))
    assert float(restored["metrics"]["bit1"]) == 7.5 and "skipped" not in restored
    old = RunPaths(REPO / "tests" / "golden" / "old-run")
    assert saved.read(old, 160).metrics is None and sorted(zero_tally(None)) == ["count", "loss", "position"]


# --- which way the headline improves -------------------------------------------------------------


@pytest.mark.slow
def test_runs_and_status_name_a_lower_is_better_headline_and_its_best_epoch(bits_run):
    """BITS's headline, bit_error, is lower-is-better by its name: each epoch line says so, `runs` takes the
    epoch of the fewest wrong bits as the best and names the headline in its columns."""
    epochs = _epochs(bits_run)
    errors = [e["test_bit_error"] for e in epochs]
    assert [e["better"] for e in epochs] == ["lower"] * 2 and len(set(errors)) == 2, epochs
    proc = dali_launch("runs", str(bits_run.root.parent), "--json")
    check_ok(proc)
    (row,) = json.loads(proc.stdout)
    assert (row["headline"], row["better"], row["best"], row["last"]) == ("bit error", "lower", min(errors), errors[-1])
    assert row["best_epoch"] == errors.index(min(errors))
    shown = dali_launch("runs", str(bits_run.root.parent), env={"COLUMNS": "200"})
    check_ok(shown)
    assert "best bit error" in shown.stdout and "last bit error" in shown.stdout and " acc" not in shown.stdout
    assert f"{min(errors):.4f}" in shown.stdout
    status = dali_launch("status", str(bits_run.root))
    assert f"; epoch 1 test bit error {errors[1]:.4f}" in status.stdout, status.stdout


def _line(epoch: int, value: float, name: str = "test_mse", **more) -> dict:
    return {"epoch": epoch, "headline": name, name: value, **more}


def test_the_best_epoch_is_the_lowest_for_a_lower_is_better_headline_and_the_highest_else():
    lower = [_line(0, 0.5, better="lower"), _line(1, 0.2, better="lower"), _line(2, 0.3, better="lower")]
    assert best(lower)["epoch"] == 1
    higher = [_line(0, 0.5, "test_miou", better="higher"), _line(1, 0.7, "test_miou", better="higher")]
    assert best(higher)["epoch"] == 1
    # lines written before `better` existed: by the headline's name (an earlier version's accuracy: no headline)
    assert best([_line(0, 0.5), _line(1, 0.9)])["epoch"] == 0 and better(_line(0, 1.0)) == "lower"
    assert best([{"epoch": 0, "test_accuracy": 0.9}, {"epoch": 1, "test_accuracy": 0.8}])["epoch"] == 0
    assert best([{"epoch": 0, "train_loss": 1.0}]) is None  # never evaluated


def test_a_task_says_which_way_its_headline_improves_or_its_name_does():
    assert [better_of(n) for n in ("mse", "abs_error", "val_loss", "accuracy", "miou", "ap50")] == (
        ["lower"] * 3 + ["higher"] * 3
    )
    task = Task(outputs=("x",), loss=None, evaluate=None, headline="error_rate")
    assert task.better_for("error_rate") == "lower"
    assert Task(outputs=("x",), loss=None, evaluate=None, better="higher").better_for("error_rate") == "higher"
    with pytest.raises(ValueError, match=r"Task\(better='up'\): give \"higher\" or \"lower\""):
        Task(outputs=("x",), loss=None, evaluate=None, better="up")


def test_a_tasks_bounds_are_one_hook_and_the_earlier_three_fields_make_the_same():
    """Bounds: its names, the values a batch gives, the check of their range; a task of the earlier form
    (bounds=values, bounded=names, check_bounds=check) is read as that Bounds; part of it alone is one line."""
    import numpy as np

    from dali_launch.trainer.errors import UsageError
    from dali_launch.trainer.tasks.classification import bounded_class_ids
    from dali_launch.trainer.tasks.contract import Bounds

    ids = bounded_class_ids("labels", 3)
    assert ids.names == ("labels",) and ids.values({"labels": np.float32([[0.0, 1.0, 0.0]])}) == {"labels": None}
    assert ids.values({"labels": np.int32([2, 0])})["labels"].tolist() == [2, 0]
    ids.check({"labels": 0}, {"labels": 2}, "training", "mnist")
    with pytest.raises(UsageError, match=r"^--num-classes 3 but --pipeline mnist gave training label 3; "):
        ids.check({"labels": 0}, {"labels": 3}, "training", "mnist")
    earlier = Task(("x", "y"), None, None, bounds=ids.values, bounded=("labels",), check_bounds=ids.check)
    assert earlier.bounds == Bounds(("labels",), ids.values, ids.check) and Task(("x",), None, None).bounds is None
    with pytest.raises(ValueError, match=r"^Task\(bounded=\.\.\.\) without the rest: give bounds, bounded and "):
        Task(("x",), None, None, bounded=("labels",))


def _row(name: str, headline: str | None, best_value: float | None) -> dict:
    return {
        "kind": "run", "run": name, "state": "finished", "why": None, "mode": "train", "nodes": 1, "processes": 1,
        "devices_per_process": 1, "epochs_done": 2, "epochs": 2, "headline": headline, "best": best_value,
        "last": best_value, "images_per_s": 100.0, "wall_time_s": 5.0,
    }  # fmt: skip


def test_the_table_heads_the_headline_columns_with_the_name_the_runs_share_or_names_it_in_each_cell():
    from rich.console import Console

    def printed(rows) -> str:
        console = Console(width=200, record=True)
        console.print(table(rows))
        return console.export_text()

    shared = printed([_row("a", "miou", 0.75), _row("b", "miou", 0.5), _row("c", None, None)])
    assert "best miou" in shared and "last miou" in shared and "0.7500" in shared
    mixed = printed([_row("a", "miou", 0.75), _row("b", "bit error", 0.125)])
    assert "miou 0.7500" in mixed and "bit error 0.1250" in mixed and "best miou" not in mixed
