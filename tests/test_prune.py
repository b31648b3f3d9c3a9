"""`dali-launch runs ROOT --prune`: a dry run unless --yes, never a live run, never a resumable one unless --run
names it. Real runs made once (finished, failed, interrupted after a checkpoint); a copy of the finished one
whose lock this test holds is the live one, as process 0 holds it while it runs."""

from __future__ import annotations

import shutil
import signal
import subprocess
import textwrap

import pytest
from conftest import CLI, REPO, check_ok, dali_launch, wait_for

from dali_launch.launcher.commands.prune import folder_size, size_text
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths, hold_lock

FAILING = """
import flax.linen as nn
import jax


def _fail(x):
    raise RuntimeError("fails in its first step (injected)")


class Failing(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        jax.debug.callback(_fail, x[0, 0])
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


def factory(num_classes):
    return Failing(num_classes=num_classes)
"""


@pytest.fixture(scope="module")
def made(small_lmdb, tmp_path_factory):
    """A run root holding a finished run (`done`), a failed one (`broken`) and one a SIGTERM interrupted after
    a checkpoint (`paused`)."""
    base = tmp_path_factory.mktemp("prune")
    root, code = base / "runs", base / "code"
    common = ["--data-dir", str(small_lmdb), "--keep-checkpoints", "1", "--run-root", str(root)]
    check_ok(dali_launch("train", *common, "--epochs", "1", "--name", "done"))
    code.mkdir()
    (code / "failing.py").write_text(textwrap.dedent(FAILING))
    failed = dali_launch(
        "train", *common, "--model", "failing:factory", "--name", "broken", env={"PYTHONPATH": str(code)}
    )
    assert failed.returncode != 0
    run = [*CLI, "train", *common, "--epochs", "1000", "--checkpoint-every-steps", "4", "--name", "paused"]
    proc = subprocess.Popen(run, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        paused = lambda: any(p.name.isdigit() for p in root.glob("paused-*/checkpoints/*"))
        wait_for(lambda: proc.poll() is not None or paused(), timeout_s=120)
        proc.send_signal(signal.SIGTERM)  # checkpoints at its next sync point, and stops
        proc.communicate(timeout=120)
    finally:
        proc.kill() if proc.poll() is None else None
    return root


@pytest.fixture
def root(made, tmp_path):
    """A copy of the made root, with `live`: a copy of `done` without its result, its task lock held here."""
    root = shutil.copytree(made, tmp_path / "runs", symlinks=True)
    live = RunPaths(shutil.copytree(run(root, "done").root, root / "live-20991231-235959", symlinks=True))
    live.result.unlink()
    lock = hold_lock(live.lock("task"))
    yield root
    lock.close()


def run(root, name: str) -> RunPaths:
    (found,) = root.glob(f"{name}-*")
    return RunPaths(found)


def test_prune_says_what_would_go_then_deletes_it_never_a_live_or_resumable_run(root):
    done, broken, paused, live = (run(root, n) for n in ("done", "broken", "paused", "live"))
    sizes = {p.root.name: folder_size(p.root) for p in (done, broken)}
    step = saved.newest(paused).step
    asked = dali_launch("runs", str(root), "--prune", "--keep", "0")
    check_ok(asked)
    said = asked.stdout.splitlines()
    assert (
        said[:2]
        == [
            f"would delete {done.root.name} (finished, {size_text(sizes[done.root.name])})",
            f"would delete {broken.root.name} (failed, {size_text(sizes[broken.root.name])})",
        ]
        and said[-1] == f"would free {size_text(sum(sizes.values()))} in 2 runs; add --yes to delete them"
    ), said
    assert sorted(said[2:-1]) == [  # what stays, after what goes
        f"kept {live.root.name} (running: a live run is never deleted)",
        f"kept {paused.root.name} (interrupted, resumable from step {step}: --run {paused.root.name} deletes it)",
    ], said
    assert all(p.root.is_dir() for p in (done, broken, paused, live))  # a dry run

    deleted = dali_launch("runs", str(root), "--prune", "--keep", "0", "--yes")
    check_ok(deleted)
    assert deleted.stdout.splitlines()[-1] == f"freed {size_text(sum(sizes.values()))} in 2 runs", deleted.stdout
    assert f"deleted {done.root.name} (finished, " in deleted.stdout
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == sorted(
        [paused.root.name, live.root.name]
    )


def test_selectors_choose_and_run_names_a_resumable_run_but_never_a_live_one(root):
    broken, paused, live = (run(root, n) for n in ("broken", "paused", "live"))
    check_ok(failed := dali_launch("runs", str(root), "--prune", "--failed", "--yes"))
    assert (
        failed.stdout.splitlines()[0].startswith(f"deleted {broken.root.name} (failed, ") and not broken.root.exists()
    )
    recent = dali_launch("runs", str(root), "--prune", "--older-than", "1d")
    check_ok(recent)
    assert recent.stdout == f"no run under {root} matches; nothing to delete\n"
    check_ok(named := dali_launch("runs", str(root), "--prune", "--run", "paused", "--yes"))
    assert named.stdout.startswith(f"deleted {paused.root.name} (interrupted, ") and not paused.root.exists()
    refused = dali_launch("runs", str(root), "--prune", "--run", live.root.name, "--yes")
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"dali-launch: error: --run {live.root.name} is running, and a live run is never deleted; stop it first "
        f"(`dali-launch cancel {live.root}`), then prune it"
    ], refused.stderr
    assert live.root.is_dir() and run(root, "done").root.is_dir()
