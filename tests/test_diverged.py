"""A loss that is not finite: --on-nan stop ends the run at the sync point that sees it, naming the steps
and the last good checkpoint (kept, loadable); --on-nan skip-step drops the update in the step itself."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import dali_launch
from run_readers import final_params, only_run

from dali_launch.trainer.config import TaskSpec, replaced
from dali_launch.trainer.step import sgd
from dali_launch.trainer.step.initial_state import create_train_state


@pytest.mark.slow
def test_a_diverging_run_stops_at_the_check_point_with_its_last_good_checkpoint(small_lmdb, tmp_path):
    """--learning-rate 1e4: the first steps' losses are finite (checkpointed: a sync point after every call),
    their updates soon make one NaN; the run stops there, one line, exit non-zero, and the checkpoint before
    it (the newest) loads."""
    proc = dali_launch(
        "train", "--data-dir", str(small_lmdb), "--learning-rate", "1e4", "--epochs", "2",
        "--sync-every-steps", "1", "--checkpoint-every-steps", "1", "--run-root", str(tmp_path),
    )  # fmt: skip
    paths = only_run(tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and lines[-1].startswith("dali-launch: error: the training loss became "), proc.stderr
    found = re.fullmatch(
        r"dali-launch: error: the training loss became (nan|inf) between SGD steps (\d+) and \2 \(epoch 0\), so the "
        rf"run stopped; the last good checkpoint is step (\d+) \({paths.checkpoints}/\3\), kept; train again with a "
        rf"lower --learning-rate \(now 10000\) or normalised images, or `dali-launch --resume {paths.root} --on-nan "
        r"skip-step` to drop such steps",
        lines[-1],
    )
    assert found and int(found.group(3)) == int(found.group(2)) - 1 >= 1, lines[-1]
    assert "Traceback" not in proc.stderr and not paths.metrics.exists()
    assert max(int(p.name) for p in paths.checkpoints.iterdir() if p.name.isdigit()) == int(found.group(3))
    assert all(np.isfinite(v).all() for v in final_params(paths).values())
    ending = json.loads(paths.ending(0).read_text())
    assert ending["how"] == "failed" and "the training loss became" in ending["line"]


@pytest.mark.slow
def test_an_epoch_whose_every_step_is_skipped_stops_the_run_in_one_line(small_lmdb, tmp_path):
    """--on-nan skip-step at --learning-rate 10: the first updates leave parameters that give no finite loss
    on any batch, so a later epoch drops every step; it stopped with a ZeroDivisionError traceback (its loss
    0/0). Now the run stops there in one line, exit 2 as --on-nan stop does, after the epochs before it
    reported their skipped steps; the line does not advise the flag the run already has."""
    proc = dali_launch(
        "train", "--data-dir", str(small_lmdb), "--learning-rate", "10", "--epochs", "4",
        "--on-nan", "skip-step", "--run-root", str(tmp_path),
    )  # fmt: skip
    paths = only_run(tmp_path)
    (line,) = proc.stderr.strip().splitlines()
    found = re.fullmatch(
        r"dali-launch: error: the training loss or gradients were not finite in every SGD step of epoch ([123]) "
        r"\(--on-nan skip-step dropped all 16 this task ran\), so the run stopped; the newest checkpoint, step "
        r"(\d+), holds the parameters that did so; train again from the start with a lower --learning-rate "
        r"\(now 10\) or normalised images",
        line,
    )
    assert proc.returncode == 2 and found, proc.stderr
    epochs = [json.loads(row) for row in paths.metrics.read_text().splitlines()]
    assert len(epochs) == int(found.group(1)) and int(found.group(2)) == 16 * len(epochs), epochs
    n = epochs[0]["skipped_steps"]
    assert n > 0 and f"{n} step{'s' if n > 1 else ''} skipped" in proc.stdout
    assert json.loads(paths.ending(0).read_text())["how"] == "failed"
    status = dali_launch("status", str(paths.root))  # says the same: no resume from that checkpoint
    assert status.returncode == 0 and ": failed (" in status.stdout and "resume" not in status.stdout, status.stdout


LOCAL = ["--local", "--gpus-per-node", "2", "--processes", "2", "--init-timeout-s", "60"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_every_rank_of_a_local_job_stops_on_the_nan_or_skips_its_steps(small_lmdb, tmp_path):
    """2 processes × 1 device at --learning-rate 1e4. `stop`: each rank sees the job's loss at the same check
    point and stops there, the job in one line naming the first, exit 1. `skip-step`: the non-finite steps
    are dropped on every device, counted on the epoch line and in metrics.jsonl, and the run ends with
    finite parameters, exit 0."""
    run = [*LOCAL, "--data-dir", str(small_lmdb), "--learning-rate", "1e4", "--sync-every-steps", "1"]
    stopped = dali_launch(*run, "--epochs", "2", "--run-root", str(tmp_path / "stop"))
    (line,) = stopped.stderr.strip().splitlines()
    assert stopped.returncode == 1 and re.match(r"dali-launch: rank [01] failed: the training loss became ", line), (
        stopped.stderr
    )
    # the rank that said it first is named; a rank still on its way there when the launcher ends the job (a
    # loaded machine) leaves no ending, and one that got there says the same steps and checkpoint
    endings = [json.loads(p.read_text()) for p in only_run(tmp_path / "stop").endings.glob("rank-*.json")]
    assert any(f"dali-launch: {e['line']}" == line for e in endings), (line, endings)
    assert all(e["how"] == "failed" and "the training loss became" in e["line"] for e in endings), endings
    assert len({e["line"].partition("failed: ")[2] for e in endings}) == 1

    skipped = dali_launch(*run, "--epochs", "1", "--on-nan", "skip-step", "--run-root", str(tmp_path / "skip"))
    assert skipped.returncode == 0, skipped.stderr
    paths = only_run(tmp_path / "skip")
    (metrics,) = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    assert 0 < metrics["skipped_steps"] <= 8, metrics  # 8 steps of 2 × 50
    n = metrics["skipped_steps"]
    assert f"{n} step{'s' if n > 1 else ''} skipped (loss not finite)" in skipped.stdout, skipped.stdout
    assert all(np.isfinite(v).all() for v in final_params(paths).values())


def test_skip_step_drops_an_update_whose_loss_is_not_finite():
    """One device call of two steps, the second's images NaN: it counts no samples and changes nothing;
    the first trains as it would alone. Without skip-step the NaN reaches the parameters."""
    example = np.zeros((1, 784), np.float32)
    states = {
        on_nan: create_train_state(replaced(TaskSpec(run_dir=""), on_nan=on_nan), example, 4)
        for on_nan in ("skip-step", "stop")
    }
    rng = np.random.default_rng(0)
    images = rng.random((2, 8, 784), np.float32)
    images[1, 3, 5] = np.nan
    labels = jnp.asarray(rng.integers(0, 10, (2, 8)), jnp.int32)
    batch = lambda x: {"images": x, "labels": labels[: len(x)], "valid": jnp.ones(labels[: len(x)].shape)}
    steps = lambda s, x: jax.jit(lambda s: sgd.sgd_steps(s, batch(x), sgd.JIT_JOB))(s)
    after, sums = steps(states["skip-step"], jnp.asarray(images))
    loss, count, skipped = sums["loss"], sums["count"], sums["skipped"]
    alone, first = steps(states["skip-step"], jnp.asarray(images[:1]))
    first_loss, first_count = first["loss"], first["count"]
    assert (float(count), float(skipped), int(after.step), int(after.slot)) == (8.0, 1.0, 1, 2)
    assert float(loss) == float(first_loss) and float(first_count) == 8.0
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(after.params), jax.tree.leaves(alone.params)))
    poisoned, *_ = steps(states["stop"], jnp.asarray(images))
    assert not all(np.isfinite(x).all() for x in jax.tree.leaves(poisoned.params))
