"""XLA's persistent compilation cache (trainer/compile_cache.py): a run's own folder, shared through one that only
ever holds whole files, so runs writing at once do no harm. The end-to-end run is in test_train.py."""

from __future__ import annotations

import os
import threading
import time

from dali_launch.trainer import compile_cache
from dali_launch.trainer.config import TaskSpec, TrainConfig


def test_the_default_is_the_run_roots_and_off_is_none(tmp_path, monkeypatch):
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    run = str(tmp_path / "runs" / "run-1")
    assert compile_cache.shared_folder(TaskSpec(run_dir=run)) == tmp_path / "runs" / ".compile-cache"
    given = TaskSpec(run_dir=run, train=TrainConfig(compile_cache=str(tmp_path / "mine")))
    assert compile_cache.shared_folder(given) == tmp_path / "mine"
    assert compile_cache.shared_folder(TaskSpec(run_dir=run, train=TrainConfig(compile_cache="off"))) is None
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "suite"))
    assert compile_cache.shared_folder(TaskSpec(run_dir=run)) == tmp_path / "suite"


def test_a_run_links_the_shared_entries_and_publishes_its_new_ones_whole(tmp_path):
    shared, mine, other = tmp_path / "shared", tmp_path / "run" / "compile-cache", tmp_path / "other"
    shared.mkdir()
    (shared / "jit_a-1-cache").write_bytes(b"a" * 100)
    compile_cache.link_all(shared, mine)
    assert (mine / "jit_a-1-cache").stat().st_ino == (shared / "jit_a-1-cache").stat().st_ino
    (mine / "jit_b-2-cache").write_bytes(b"b" * 100)
    (mine / "jit_c-3-cache").write_bytes(b"c")  # being written by a compile in a thread: too recent
    old = time.time() - 10
    os.utime(mine / "jit_b-2-cache", (old, old))
    assert compile_cache.publish_new(mine, shared) == 1
    assert sorted(p.name for p in shared.iterdir()) == ["jit_a-1-cache", "jit_b-2-cache"]  # no temporary left
    assert compile_cache.publish_new(mine, shared, settled_s=0) == 1  # at the task's end, everything
    compile_cache.link_all(shared, other)
    assert sorted(p.name for p in other.iterdir()) == ["jit_a-1-cache", "jit_b-2-cache", "jit_c-3-cache"]


def test_publishers_at_once_leave_one_whole_file(tmp_path):
    """Two runs compiled the same program (two serialisations of it) and publish together: the shared entry is
    one of them, whole, never a mix; nothing temporary stays."""
    shared = tmp_path / "shared"
    runs = [tmp_path / f"run-{i}" for i in range(2)]
    contents = [bytes([i]) * 4_000_000 for i in range(2)]
    for run, content in zip(runs, contents):
        run.mkdir()
        (run / "jit_same-9-cache").write_bytes(content)
    for _ in range(5):
        threads = [threading.Thread(target=compile_cache.publish_new, args=(r, shared, 0)) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (shared / "jit_same-9-cache").read_bytes() in contents
        assert [p.name for p in shared.iterdir()] == ["jit_same-9-cache"]
        (shared / "jit_same-9-cache").unlink()
