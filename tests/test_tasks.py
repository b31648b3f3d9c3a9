"""A task of one's own (trainer/tasks/contract.py): docs/tasks.md's example is the code run here, and what the
launcher refuses of a task before anything is written (launcher/route/task_check.py, step/dry_run.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import CLI, REPO, check_ok
from run_readers import only_run

DOC = REPO / "docs" / "tasks.md"


def _documented(tmp_path: Path) -> Path:
    """docs/tasks.md's task of one's own, saved as digits.py in `tmp_path`, as the page says."""
    section = DOC.read_text().split("## A task of your own", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "digits.py").write_text(code)
    return tmp_path


def _cli(*args: str, path: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=path)


@pytest.mark.slow
def test_the_documented_task_of_ones_own_trains(tmp_path):
    """The page's command, 2 epochs: its test mean absolute error under 1.2 (a constant guess is off by 2.5), the
    training metric it names reported, the epoch line and metrics.jsonl saying its headline."""
    path = _documented(tmp_path)
    command = re.search(r"PYTHONPATH=\. dali-launch train (.*)\n", DOC.read_text()).group(1).split()
    command[command.index("--epochs") + 1] = "2"
    proc = _cli("train", *command, "--run-root", str(tmp_path / "runs"), path=path)
    check_ok(proc)
    epochs = [json.loads(line) for line in only_run(tmp_path / "runs").metrics.read_text().splitlines()]
    assert epochs[-1]["headline"] == "test_abs_error" and epochs[-1]["test_abs_error"] < 1.2, epochs[-1]
    assert epochs[-1]["train_abs_error"] < epochs[0]["train_abs_error"] and 0 < epochs[-1]["test_within_half"] <= 1
    line = r"epoch 1: loss [0-9.]+  abs_error [0-9.]+  test abs error [0-9.]+ \(2000 images, lower is better\)"
    assert re.search(line, proc.stdout), proc.stdout
    assert f"done: test abs error {epochs[-1]['test_abs_error']:.4f} after 2 epochs" in proc.stdout


BAD = {
    "not_a_scalar": ("return jnp.sum(error**2 * step.valid)", "return error**2 * step.valid"),
    "unnamed_metric": ("metrics=(\"abs_error\",),", "metrics=(),"),
    "wrong_outputs": ("outputs=(\"images\", \"labels\"),", "outputs=(\"images\", \"targets\"),"),
    "no_dict": ("return {\"abs_error\": jnp.sum(error * step.valid), \"within_half\"", "return jnp.sum(error * step.valid), {\"within_half\""),
    "broken_loss": ("error = step.model(batch[\"images\"]) - value(batch)", "error = step.model(batch[\"images\"]) - batch[\"targets\"]"),
    "no_direction": ("better=\"lower\",", "better=\"down\","),
}  # fmt: skip
REFUSED = {
    "not_a_scalar": "the task's loss returned shape (2,); return its sum over the batch, a scalar",
    "unnamed_metric": "the task's loss returned metrics {'abs_error': ()}, but the task names []",
    "wrong_outputs": "--pipeline mnist gives images, labels, but --task bad:task takes images, targets; name the "
    "task's outputs as the pipeline gives them, or use a --pipeline of your own",
    "no_dict": "--task bad:task: its evaluate returned tuple; return a dict of sums",
    "broken_loss": "--task bad:task: its loss failed on a batch of the pipeline's shapes (KeyError: 'targets')",
    "no_direction": "--task bad:task: importing bad failed (ValueError: Task(better='down'): give \"higher\" or "
    '"lower" (or leave it out)); fix that module',
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_task_that_cannot_train_is_refused_before_anything_is_written(tmp_path, case):
    path = _documented(tmp_path)
    old, new = BAD[case]
    code = (path / "digits.py").read_text()
    assert old in code, f"docs/tasks.md's example changed: {old!r} is no longer in it"
    (path / "bad.py").write_text(code.replace(old, new))
    proc = _cli(
        "train", "--task", "bad:task", "--model", "bad:Regressor", "--run-root", str(tmp_path / "runs"), path=path
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert REFUSED[case] in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_an_option_the_task_does_not_take_is_refused(tmp_path):
    path = _documented(tmp_path)
    proc = _cli(
        "train", "--task", "digits:task", "--model", "digits:Regressor", "--mixup", "0.2", path=path, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert "--mixup 0.2: --task digits:task does not take --mixup; leave it out" in proc.stderr


def test_a_task_factory_is_given_the_options_it_names(tmp_path):
    """--task mod:make, a factory naming num_classes and label_smoothing, called with the run's values."""
    (tmp_path / "made.py").write_text(
        textwrap.dedent(
            """
            from dali_launch.trainer.tasks.classification import classification
            seen = {}
            def make(num_classes, label_smoothing):
                seen.update(num_classes=num_classes, label_smoothing=label_smoothing)
                return classification(num_classes, label_smoothing)
            """
        )
    )
    import sys

    from dali_launch.trainer.tasks.registry import create_task

    sys.path.insert(0, str(tmp_path))
    try:
        task = create_task("made:make", num_classes=7, label_smoothing=0.1, mixup=0.0, cutmix=0.0)
        import made

        assert made.seen == {"num_classes": 7, "label_smoothing": 0.1} and task.outputs == ("images", "labels")
    finally:
        sys.path.remove(str(tmp_path))
