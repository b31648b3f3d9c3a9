"""XLA's persistent compilation cache (trainer/compile_cache.py): a run's own folder, shared through one that only
ever holds whole files, so runs writing at once do no harm; every process of a job writes its own programs.
The end-to-end run is in test_train.py."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pytest
from conftest import check_ok, dali_launch

from dali_launch.trainer import compile_cache
from dali_launch.trainer.config import TaskSpec, replaced
from dali_launch.trainer.run_dir import RunPaths


def test_the_default_is_the_run_roots_and_off_is_none(tmp_path, monkeypatch):
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    run = str(tmp_path / "runs" / "run-1")
    assert compile_cache.shared_folder(TaskSpec(run_dir=run)) == tmp_path / "runs" / ".compile-cache"
    given = replaced(TaskSpec(run_dir=run), compile_cache=str(tmp_path / "mine"))
    assert compile_cache.shared_folder(given) == tmp_path / "mine"
    assert compile_cache.shared_folder(replaced(TaskSpec(run_dir=run), compile_cache="off")) is None
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


@pytest.mark.multiprocess
def test_a_warm_two_process_run_compiles_nothing_on_either_process(small_lmdb, tmp_path):
    """Process 1 hashes a program differently from process 0 on CPUs, and JAX writes from process 0 alone: its
    entries are written too (compile_cache.every_process_writes), so the second run of a run root finds every
    program it compiled on each process. JAX names each miss in the rank logs (`jax_explain_cache_misses`)."""
    env = {**os.environ, "JAX_EXPLAIN_CACHE_MISSES": "1", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    common = ["--local", "--gpus-per-node", "2", "--processes", "2", "--data-dir", str(small_lmdb), "--epochs", "1"]
    common += ["--compile-cache", str(tmp_path / "xla"), "--run-root", str(tmp_path / "runs")]
    for _ in range(2):
        check_ok(dali_launch(*common, env=env))
    first, second = sorted(p for p in (tmp_path / "runs").iterdir() if p.name.startswith("dali-launch-"))
    # Cold, the first call was compiled beside the pipelines' build, on the batch expected of them (set_up.py),
    # and found that program: process 0 (which writes at once) missed the step once, not twice
    cold = re.findall(r"PERSISTENT COMPILATION CACHE MISS for '(jit_\w+)'", RunPaths(first).log(0).read_text())
    assert cold.count("jit_sharded_call") == 1, cold
    ranks = json.loads(RunPaths(first).rank_map.read_text())
    assert {r["resolved"]["first_call_compiled"] for r in ranks} == {"beside the pipelines' build"}
    for rank in (0, 1):
        log = RunPaths(second).log(rank).read_text()
        missed = re.findall(r"PERSISTENT COMPILATION CACHE MISS for '(jit_\w+)'", log)
        assert not {"jit_fresh", "jit_sharded_call", "jit_eval_call"} & set(missed), (rank, missed)
    assert not list((tmp_path / "xla").glob(".*.tmp"))  # every entry renamed into place whole


def test_the_kept_programs_hook_takes_jaxs_writer_calls_of_either_version(tmp_path, monkeypatch):
    """JAX 0.10 calls its writer with `host_callbacks` last, 0.11 without it (a 2-process run on the GPU
    machine's JAX 0.11.2 failed on the hook before it took a default): both calls are kept, a program
    with host callbacks or one compiled too fast for the cache is not."""
    from jax._src import compiler

    monkeypatch.setattr(compiler, "_cache_write", compiler._cache_write)  # restored after the test
    monkeypatch.setattr(compile_cache, "_PENDING", [])
    compile_cache.every_process_writes(tmp_path, 1)  # a process other than 0
    compiler._cache_write("jit_a-1", 5.0, "jit_a", "backend", "executable")  # JAX 0.11
    compiler._cache_write("jit_b-2", 5.0, "jit_b", "backend", "executable", [])  # JAX 0.10
    compiler._cache_write("jit_c-3", 5.0, "jit_c", "backend", "executable", ["a callback"])
    compiler._cache_write("jit_d-4", 0.01, "jit_d", "backend", "executable")
    assert [entry.name for entry, *_ in compile_cache._PENDING] == ["jit_a-1-cache", "jit_b-2-cache"]
