"""`dali-launch runs` tells finished, failed, running, interrupted and cancelled runs apart; `plot` draws several."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, check_ok, dali_launch, wait_for
from run_readers import rank_report
from test_prune import FAILING

CLI = [sys.executable, "-m", "dali_launch.launcher.cli"]


def _rows(root) -> dict[str, dict]:
    proc = dali_launch("runs", str(root), "--json")
    check_ok(proc)
    return {row["run"]: row for row in json.loads(proc.stdout)}


def rows_of(root) -> list[str]:
    return list(_rows(root))


def _cancelled_train_run(root, common):
    """A `train` run stopped by `dali-launch cancel`: it checkpoints, and both commands end with exit 0."""
    proc = subprocess.Popen(
        [*CLI, "train", *common, "--epochs", "1000", "--name", "cancelled", "--run-root", str(root)],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: proc.poll() is not None or rank_report(root, 0), timeout_s=120)
        [row] = _rows(root).values()
        check_ok(dali_launch("cancel", row["run"], "--run-root", str(root), timeout=150))
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 0, err
    assert "cancelled (`dali-launch cancel`); checkpoint written at step" in out
    return root


@pytest.mark.slow
def test_runs_lists_each_state_and_plot_draws_them(small_lmdb, tmp_path):
    root, common = tmp_path / "runs", ["--data-dir", str(small_lmdb), "--gpus-per-node", "2", "--log-every-steps", "4"]
    check_ok(dali_launch("train", *common, "--epochs", "2", "--name", "done", "--run-root", str(root)))
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "failing.py").write_text(textwrap.dedent(FAILING))
    failed = dali_launch(
        "train",
        *common,
        "--model",
        "failing:factory",
        "--name",
        "broken",
        "--run-root",
        str(root),
        env={"PYTHONPATH": str(tmp_path / "code")},
    )
    assert failed.returncode != 0
    live_root = tmp_path / "live"
    proc = subprocess.Popen(
        [*CLI, "train", *common, "--epochs", "1000", "--name", "long", "--run-root", str(live_root)],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: proc.poll() is not None or rank_report(live_root, 0), timeout_s=120)
        [running] = _rows(live_root).values()
        proc.send_signal(signal.SIGTERM)  # checkpoints at its next sync point, and stops
        proc.communicate(timeout=120)
    finally:
        proc.kill() if proc.poll() is None else None
    [stopped] = _rows(live_root).values()
    # A SLURM run's job id: where squeue exists, the run is asked for there (a job long gone: not running).
    (live_root / stopped["run"] / "job.json").write_text(json.dumps({"job_id": "999999"}))
    assert [row["state"] for row in _rows(live_root).values()] == ["interrupted"]
    assert [row["state"] for row in _rows(_cancelled_train_run(tmp_path / "cancelled", common)).values()] == [
        "cancelled"
    ]

    rows = {row["run"].split("-")[0]: row for row in _rows(root).values()}
    assert rows["done"]["state"] == "finished" and rows["broken"]["state"] == "failed"
    assert running["state"] == "running" and stopped["state"] == "interrupted"
    done = rows["done"]
    assert done["mode"] == "train" and (done["nodes"], done["processes"], done["devices_per_process"]) == (1, 1, 2)
    assert (done["epochs_done"], done["epochs"]) == (2, 2) and done["images_per_s"] > 0
    assert 0 < done["last"] <= done["best"] <= 1 and done["wall_time_s"] > 0 and done["headline"] == "accuracy"
    assert rows["broken"]["epochs_done"] == 0 and rows["broken"]["best"] is None
    table = dali_launch("runs", str(root))
    check_ok(table)
    assert all(word in table.stdout for word in ("finished", "failed", "2/2", done["run"]))
    for columns in (100, 60):  # a narrow terminal: one line a row, each name whole (status and --resume take it)
        narrow = dali_launch("runs", str(root), env={"COLUMNS": str(columns)})
        check_ok(narrow)
        lines = narrow.stdout.splitlines()
        assert len(lines) == 4 + 2 and max(map(len, lines)) <= columns, narrow.stdout  # 2 rows in 4 lines of frame
        assert all(name in narrow.stdout for name in rows_of(root)) and "failed" in narrow.stdout
    assert "rank 0 failed" in dali_launch("runs", str(root), env={"COLUMNS": "100"}).stdout  # its why, shortened

    out = tmp_path / "curves.png"
    check_ok(
        dali_launch("plot", done["run"], stopped["path"], "--run-root", str(root), "--out", str(out))
    )  # a name, a path
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    bad = dali_launch("plot", str(tmp_path / "code"), "--out", str(out))
    assert bad.returncode == 2 and "is not a run directory" in bad.stderr
