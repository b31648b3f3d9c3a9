"""`--resume RUN`: from the run directory alone, in the mode the run started in (launcher/route/resume.py).

Run directories are made here as the launcher makes them (directory.create), without training; a resumed
run that trains is in test_local.py and test_resilience.py.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from catalogue import run_entry, snapshot

from dali_launch.launcher.cli import main
from dali_launch.launcher.route import directory
from dali_launch.launcher.run_config import LaunchConfig, RunConfig
from dali_launch.trainer.config import Layout, TaskSpec, replaced

BACKENDS = {"none": "dali-launch train", "local": "dali-launch --local", "slurm": "dali-launch"}


@pytest.fixture
def made(small_lmdb, tmp_path):
    """made(backend) -> a run directory as that mode writes it, 3 epochs, under tmp_path/made."""

    def make(backend: str):
        launch = LaunchConfig(
            run_root=str(tmp_path / "made"), local=backend == "local", gpus_per_node=None if backend == "none" else 2
        )
        run = replaced(RunConfig(launch=launch), epochs=3)
        return directory.create(run, small_lmdb, backend)

    return make


@pytest.mark.parametrize("entry", [["train"], []], ids=["train", "launch"])
def test_a_missing_run_directory_says_so(capsys, tmp_path, entry):
    run_entry(
        capsys,
        tmp_path,
        [*entry, "--resume", str(tmp_path / "nope")],
        f"--resume {tmp_path / 'nope'}: no such run directory; pass one that dali-launch made (they are under "
        f"--run-root, default runs/)",
    )


def test_a_folder_that_is_no_run_directory_says_so(capsys, tmp_path):
    (tmp_path / "plain").mkdir()
    run_entry(
        capsys,
        tmp_path,
        ["--resume", str(tmp_path / "plain")],
        f"--resume {tmp_path / 'plain'} is not a run directory (no config.json and config.toml); pass one that "
        f"dali-launch made under --run-root",
    )


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_train_continues_only_its_own_runs(capsys, made, tmp_path, backend):
    paths = made(backend)
    run_entry(
        capsys,
        tmp_path,
        ["train", "--resume", str(paths.root)],
        f"--resume {paths.root} was started by `{BACKENDS[backend]}`, not `dali-launch train`; continue it "
        f"with `dali-launch --resume {paths.root}`",
    )


def test_local_cannot_continue_a_slurm_run(capsys, made, tmp_path):
    paths = made("slurm")
    run_entry(
        capsys,
        tmp_path,
        ["--local", "--resume", str(paths.root)],
        f"--resume {paths.root} was started by `dali-launch`, not on local processes; continue it with "
        f"`dali-launch --resume {paths.root}` (no --local)",
    )


@pytest.mark.parametrize(
    "flags, shown",
    [
        (["--batch-size", "64"], "--batch-size 64 differs from the run's own 50"),
        (["--data-dir", "elsewhere"], "--data-dir elsewhere differs from the run's own {data}"),
    ],
)
def test_flags_that_change_the_training_are_refused(capsys, made, small_lmdb, tmp_path, flags, shown):
    paths = made("local")
    flag = flags[0]
    run_entry(
        capsys,
        tmp_path,
        ["--resume", str(paths.root), *flags],
        f"{shown.format(data=small_lmdb.resolve())} and would make --resume {paths.root} another run; leave "
        f"{flag} out to continue it, or start a new run",
    )


@pytest.mark.parametrize(
    "given, flag, value, before",
    [("--gpus-per-node", "--gpus-per-node", "1", 2), ("--processes", "--tasks-per-node", "2", "default")],
)
def test_a_shard_order_checkpoint_of_an_earlier_version_keeps_its_topology(
    capsys, made, tmp_path, given, flag, value, before
):
    """Without a shard record, its checkpoint holds each process's own readers (this version's go on anywhere:
    test_elastic.py, test_start_point.py)."""
    paths = made("local")
    step = paths.checkpoints / "7"
    (step / "meta").mkdir(parents=True)
    (step / "meta" / "metadata").write_text(json.dumps({"epoch": 1, "calls_done": 0, "dali": [["AA=="]]}))
    (step / "commit_success.txt").write_text("")
    run_entry(
        capsys,
        tmp_path,
        ["--resume", str(paths.root), given, value],
        f"{flag} {value} differs from the run's own {before}, but the newest checkpoint of --resume {paths.root} "
        f"was written by an earlier dali-launch, whose shard-order checkpoints hold each process's own readers "
        f"only; leave {flag} out to continue it",
    )


def test_a_shard_order_run_may_resume_on_another_topology(capsys, made):
    """The default order resizes too (before any checkpoint, the run starts afresh on the new layout)."""
    paths = made("local")
    assert main(["--resume", str(paths.root), "--gpus-per-node", "1", "--processes", "1", "--dry-run"]) == 0
    assert "changed: --gpus-per-node 1, --tasks-per-node 1" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["none", "local", "slurm"])
def test_a_dry_run_of_a_resume_prints_the_plan_and_changes_nothing(capsys, made, tmp_path, backend, monkeypatch):
    """In every mode, with a changed --epochs and the same value of an unchangeable flag given again."""
    monkeypatch.delenv("SLURM_CONF", raising=False)  # a dry run needs no SLURM
    paths = made(backend)
    before = snapshot(tmp_path)
    entry = ["train"] if backend == "none" else []
    code = main([*entry, "--resume", str(paths.root), "--epochs", "5", "--batch-size", "50", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and snapshot(tmp_path) == before
    assert f"resuming {paths.root} (started by `{BACKENDS[backend]}`); changed: --epochs 5" in out
    assert "1 process on 1 node" in out if backend == "none" else "1 process on 1 node, 2 devices each" in out
    if backend == "slurm":
        assert "#SBATCH" in out
    else:
        assert json.loads(out[out.index("{") :])["step"]["epochs"] == 5
    assert json.loads(paths.config.read_text())["step"]["epochs"] == 3


def test_a_run_directory_of_the_previous_version_still_resumes_and_lists(capsys, made, monkeypatch):
    """Before `Layout`, config.json kept the launcher's layout in `distributed` and named `train`'s mode `none`."""
    from dali_launch.launcher.commands import runs as run_list

    paths = made("none")
    spec = json.loads(paths.config.read_text())
    spec["distributed"].update({**spec.pop("layout"), "backend": "none"})
    paths.config.write_text(json.dumps(spec))
    assert TaskSpec.load(paths.root).layout == Layout(backend="train", num_processes=1, local_device_count=1)
    assert run_list.describe(paths)["mode"] == "train"
    code = main(["train", "--resume", str(paths.root), "--dry-run"])
    assert code == 0 and f"resuming {paths.root} (started by `dali-launch train`)" in capsys.readouterr().out


def test_a_changed_flag_is_written_to_the_run_before_it_continues(made, monkeypatch, capsys):
    """More epochs reach the tasks: config.json and config.toml hold the new value, and the run
    continues in its own mode (here: the local backend, stopped at its start)."""
    from dali_launch.launcher.backends import local

    paths, started = made("local"), []
    monkeypatch.setattr(local, "LocalRanks", lambda run, p, echo: started.append((run, p)) or _Stop())
    with pytest.raises(_Stopped):
        main(["--resume", str(paths.root), "--epochs", "7", "--watchdog-s", "30"])
    ((run, at),) = started
    assert at.root == paths.root and run.launch.local and run.step.epochs == 7
    spec = json.loads(paths.config.read_text())
    assert (spec["step"]["epochs"], spec["resilience"]["watchdog_s"]) == (7, 30)
    assert "epochs = 7" in paths.config_toml.read_text() and "resume" not in dataclasses.asdict(run.step)


class _Stopped(Exception):
    pass


class _Stop:
    def start(self):
        raise _Stopped


@pytest.mark.slow
def test_a_moved_run_directory_keeps_working(small_lmdb, tmp_path):
    """config.json names where the run was made; a run moved elsewhere resumes where it is now."""
    from conftest import check_ok, dali_launch
    from run_readers import only_run

    check_ok(dali_launch("train", "--data-dir", str(small_lmdb), "--epochs", "1", "--run-root", str(tmp_path / "a")))
    moved = tmp_path / "b" / "moved"
    moved.parent.mkdir()
    only_run(tmp_path / "a").root.rename(moved)
    check_ok(dali_launch("--resume", str(moved), "--epochs", "2"))
    assert [json.loads(line)["epoch"] for line in (moved / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    assert (moved / "result.json").exists() and not (tmp_path / "a").joinpath(moved.name).exists()


@pytest.mark.slow
def test_a_run_resumes_by_its_name_and_a_resume_that_would_lose_what_it_did_is_refused(small_lmdb, tmp_path):
    """RUN may be the run's name as `dali-launch runs` lists it (README), as for status and logs; --run-root
    beside it says where, and is no change of the run's. Then, of that run: fewer --epochs than the checkpoint
    has done (config.toml was rewritten to them), and the run with its checkpoints/ deleted (it started again
    from step 0 without a word): each one line, exit 2, nothing changed."""
    import shutil

    from conftest import check_ok, dali_launch
    from run_readers import only_run

    root = tmp_path / "runs"
    check_ok(
        dali_launch("train", "--data-dir", str(small_lmdb), "--epochs", "1", "--name", "n", "--run-root", str(root))
    )
    paths = only_run(root)
    resumed = dali_launch("train", "--resume", paths.root.name, "--run-root", str(root), "--epochs", "2")
    check_ok(resumed)
    assert f"resuming {paths.root} " in resumed.stdout
    assert [json.loads(line)["epoch"] for line in paths.metrics.read_text().splitlines()] == [0, 1]

    # --init-from takes the name too (a dry run: the launcher's checks load its checkpoint's shapes); and refuses
    # a name that is no run's in one line
    tuned = dali_launch("train", "--init-from", paths.root.name, "--run-root", str(root), "--dry-run")
    check_ok(tuned)
    assert str(paths.root) in tuned.stdout, tuned.stdout
    typo = dali_launch("train", "--init-from", "no-such-run", "--run-root", str(root), "--data-dir", str(small_lmdb))
    assert typo.returncode == 2 and typo.stderr.startswith("dali-launch: error: --init-from no-such-run: no run named")
    toml, metrics = paths.config_toml.read_text(), paths.metrics.read_text()
    fewer = dali_launch("--resume", str(paths.root), "--epochs", "1")
    assert fewer.returncode == 2 and fewer.stderr.strip().endswith(
        f"--epochs 1 is fewer than the 2 epochs --resume {paths.root} has done; give --epochs 2 or more, or leave "
        f"--epochs out"
    ), fewer.stderr
    assert paths.config_toml.read_text() == toml
    shutil.rmtree(paths.checkpoints)
    gone = dali_launch("--resume", paths.root.name, "--run-root", str(root), "--epochs", "3")
    assert gone.returncode == 2 and gone.stderr.strip().endswith(
        f"--resume {paths.root}: it trained 2 epochs (metrics.jsonl) but has no whole checkpoint left in checkpoints/, so "
        f"it would start again from step 0; start a new run with its settings instead: dali-launch train --config "
        f"{paths.config_toml}"
    ), gone.stderr
    assert paths.metrics.read_text() == metrics and paths.config_toml.read_text() == toml
