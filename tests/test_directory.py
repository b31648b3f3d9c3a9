"""Run directories (launcher/route/directory.py): made once and complete, reopened for --resume, refused while live."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dali_launch.launcher.route import directory, resume
from dali_launch.launcher.run_config import LaunchConfig, RunConfig
from dali_launch.trainer.config import TaskSpec, replaced
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, hold_lock


def _run(tmp_path, **train) -> RunConfig:
    return replaced(RunConfig(launch=LaunchConfig(run_root=str(tmp_path / "runs"), name="a b/c")), **train)


def test_create_writes_every_file_and_names_the_run(tmp_path):
    paths = directory.create(_run(tmp_path, epochs=3), tmp_path / "data", "local")
    assert paths.root.parent == tmp_path / "runs" and paths.root.name.startswith("a-b-c-")
    spec = TaskSpec.load(paths.root)
    assert (spec.step.epochs, spec.layout.backend, spec.data.data_dir) == (3, "local", str(tmp_path / "data"))
    assert "epochs = 3" in paths.config_toml.read_text() and json.loads(paths.launch.read_text())["name"] == "a b/c"
    assert paths.logs.is_dir()
    again = directory.create(_run(tmp_path), tmp_path / "data", "local")  # the same second: a suffix, never a clash
    assert again.root != paths.root


def test_check_root_refuses_a_file_on_the_way(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is not a folder"):
        directory.check_root(str(tmp_path / "file" / "runs"))
    directory.check_root(str(tmp_path / "new" / "runs"))  # can be made: fine, and nothing is written
    assert not (tmp_path / "new").exists()


def test_resume_rewrites_the_spec_only_when_changed(tmp_path):
    paths = directory.create(_run(tmp_path, epochs=3), tmp_path / "data", "none")
    before = paths.config.read_text()
    run = dataclasses.replace(_run(tmp_path, epochs=3), launch=LaunchConfig(resume=str(paths.root)))
    assert directory.resume(run, tmp_path / "data", "none", changed=False).root == paths.root
    assert paths.config.read_text() == before
    longer = replaced(run, epochs=7)
    directory.resume(longer, tmp_path / "data", "none", changed=True)
    assert TaskSpec.load(paths.root).step.epochs == 7
    assert "epochs = 7" in paths.config_toml.read_text() and "# resume is unset" in paths.config_toml.read_text()


def test_a_held_lock_makes_the_run_live(tmp_path):
    paths = RunPaths(tmp_path / "run")
    resume.refuse_live(paths)  # no locks at all
    lock = hold_lock(paths.lock("task"))
    with pytest.raises(UsageError, match="a job is still running in it"):
        resume.refuse_live(paths)
    lock.close()
    resume.refuse_live(paths)


def test_runs_lists_sweeps_with_their_points_and_says_why_a_run_failed(tmp_path, capsys):
    """A sweep of two points (made, not run) is one row followed by its points'; a run whose rank recorded
    a failure says it in its row and in `status`."""
    from dali_launch.launcher.commands import runs
    from dali_launch.launcher.commands.jobs import find, status_line
    from dali_launch.launcher.options import Values
    from dali_launch.launcher.route.sweep import sweep_runs
    from dali_launch.trainer.resilience import ending

    values = Values(
        {**{f.name: f.default for f in dataclasses.fields(LaunchConfig)}, "run_root": str(tmp_path / "runs")},
        sweep=["learning-rate=0.05,0.1"],
        max_parallel=None,
    )
    sweep, point_runs = sweep_runs(values)
    point_paths = [directory.create(r, tmp_path / "data", "local") for r in point_runs]
    sweep.write("local", point_paths)
    failed = directory.create(_run(tmp_path), tmp_path / "data", "local")
    ending.record(failed, 0, ending.FAILED, "rank 0 failed: the training loss became nan (injected)")
    rows = runs.collect(tmp_path / "runs")
    assert [row["kind"] for row in rows] == ["run", "sweep", "point", "point"]  # folders in name order
    sweep_row = next(row for row in rows if row["kind"] == "sweep")
    assert sweep_row["state"] == "2 not started" and sweep_row["axes"] == {"learning_rate": [0.05, 0.1]}
    points = [row for row in rows if row["kind"] == "point"]
    assert [row["run"] for row in points] == [f"{sweep.folder.name}/{p.root.name}" for p in point_paths]
    (broken,) = [row for row in rows if row["path"] == str(failed.root)]
    assert broken["state"] == "failed" and broken["why"] == "rank 0 failed: the training loss became nan (injected)"
    assert "(rank 0 failed: the training loss became nan (injected))" in status_line(find(str(failed.root), "runs"))
    runs.runs(str(tmp_path / "runs"))
    table = capsys.readouterr().out
    assert f"{sweep.folder.name}/ (sweep, 2 points)" in table and "learning-rate=0.05,0.1" in table
    assert "the training loss became nan" in table
