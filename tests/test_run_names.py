"""RUN may be the name given to `--name`: `--name lc` makes `lc-YYYYmmdd-HHMMSS`, and `status lc`, `logs lc`,
`cancel lc`, `--resume lc` take its newest run; where another run of that name runs and the newest does not,
one line lists them. One real `train` run; the others are copies of it under older or other names."""

from __future__ import annotations

import shutil

import pytest
from conftest import check_ok, dali_launch
from run_readers import only_run

from dali_launch.trainer.run_dir import RunPaths, hold_lock


@pytest.fixture(scope="module")
def root(small_lmdb, tmp_path_factory):
    """A run root: `lc`'s run, an older copy of it, and a newer run of another name that starts with `lc-`."""
    root = tmp_path_factory.mktemp("names") / "runs"
    made = dali_launch("train", "--data-dir", str(small_lmdb), "--epochs", "1", "--name", "lc", "--run-root", str(root))
    check_ok(made)
    newest = only_run(root)
    RunPaths(shutil.copytree(newest.root, root / "lc-20200101-000000", symlinks=True)).result.unlink()  # unfinished
    shutil.copytree(newest.root, root / "lc-x-20991231-235959", symlinks=True)
    return root


def newest(root) -> RunPaths:
    return RunPaths(max(p for p in root.glob("lc-2026*")))


def test_the_name_given_to_name_finds_its_newest_run_everywhere_a_run_is_taken(root):
    run = newest(root)
    status = dali_launch("status", "lc", "--run-root", str(root))
    check_ok(status)
    assert status.stdout.startswith(f"run {run.root.name}: finished; ") and str(run.root) in status.stdout
    logs = dali_launch("logs", "lc", "--run-root", str(root), "--rank", "0")
    check_ok(logs)
    assert logs.stdout == run.log(0).read_text(), logs.stdout[-500:]
    cancel = dali_launch("cancel", "lc", "--run-root", str(root))
    assert cancel.returncode == 0 and cancel.stdout == f"run {run.root.name} is not running; nothing to cancel\n"
    resumed = dali_launch("--resume", "lc", "--run-root", str(root), "--epochs", "2", "--dry-run")
    check_ok(resumed)
    assert str(run.root) in resumed.stdout and "lc-20200101-000000" not in resumed.stdout, resumed.stdout
    other = dali_launch("status", "lc-x", "--run-root", str(root))
    check_ok(other)
    assert other.stdout.startswith("run lc-x-20991231-235959: ")


def test_a_name_whose_newest_run_is_not_the_one_running_is_one_line_listing_them(root):
    """The older run holds its task lock (as its process 0 does while it runs): which one is meant is unclear."""
    older = RunPaths(root / "lc-20200101-000000")
    lock = hold_lock(older.lock("task"))
    try:
        refused = dali_launch("status", "lc", "--run-root", str(root))
        by_full_name = dali_launch("status", older.root.name, "--run-root", str(root))
    finally:
        lock.close()
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"dali-launch: error: lc names 2 runs under --run-root {root}, and one that runs is not the newest: "
        f"{older.root.name} (running), {newest(root).root.name} (finished, the newest); pass the name of the one "
        "you mean"
    ], refused.stderr
    check_ok(by_full_name)
    assert by_full_name.stdout.startswith(f"run {older.root.name}: running")
    check_ok(dali_launch("status", "lc", "--run-root", str(root)))  # released: the newest again
