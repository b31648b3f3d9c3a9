"""Sweeps (launcher/route/sweep.py): the grid, its dry run, one SLURM job array with %N, local points one after another."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from catalogue import run_entry
from conftest import check_ok, dali_launch, squeue

from dali_launch.launcher.route.sweep import axes, points
from dali_launch.trainer.run_dir import RunPaths

GRID = ["--sweep", "learning-rate=0.05,0.1", "--sweep", "batch_size=25,50"]


def test_the_grid_is_every_combination_typed_as_its_flag():
    grid = axes(["learning-rate=0.05,1", "batch_size=25,50", "parallel=pmap,sharded", "model=mlp"])
    assert grid == [
        ("learning_rate", [0.05, 1.0]),
        ("batch_size", [25, 50]),
        ("parallel", ["pmap", "sharded"]),
        ("model", ["mlp"]),
    ]
    assert len(points(grid)) == 8 and points(grid)[1] == {
        "learning_rate": 0.05,
        "batch_size": 25,
        "parallel": "sharded",
        "model": "mlp",
    }


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(
            ["--sweep", "lr=0.1,0.2"],
            "--sweep lr: no such flag; sweep one of the training, data or checkpoint flags (dali-launch --help)",
            id="sweep-key-not-a-flag",
        ),
        pytest.param(
            ["--sweep", "epochs=1,two"],
            '--sweep epochs = "two" is a string; write an integer, e.g. epochs = 5',
            id="sweep-value-of-the-wrong-type",
        ),
        pytest.param(
            ["--sweep", "nodes=1,2"],
            "--sweep nodes: --nodes shapes the job or its submission, which is one "
            "for the whole sweep; give it once as a flag",
            id="sweep-the-jobs-shape",
        ),
        pytest.param(
            ["--sweep", "epochs"],
            "--sweep 'epochs' is not KEY=V1,V2,...; e.g. --sweep learning-rate=0.05,0.1",
            id="sweep-without-values",
        ),
        pytest.param(["--sweep", "batch-size=50,-1"], "--batch-size -1 must be at least 1", id="sweep-a-bad-point"),
        pytest.param(
            ["--max-parallel", "2"],
            "--max-parallel caps the points of a --sweep running at once; give a --sweep, or leave it out",
            id="max-parallel-without-sweep",
        ),
    ],
)
def test_bad_sweeps(capsys, place, nothing_starts, args, message):
    folder, fill = place
    run_entry(capsys, folder, *fill(["--local", *args, "--data-dir", "{data}", "--run-root", "{root}"], message, None))


def test_dry_run_prints_the_points_and_the_array_script(small_lmdb, tmp_path):
    proc = dali_launch(
        *GRID,
        "--nodes",
        "2",
        "--platform",
        "cpu",
        "--max-parallel",
        "2",
        "--dry-run",
        "--data-dir",
        str(small_lmdb),
        "--run-root",
        str(tmp_path / "runs"),
    )
    check_ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0].split() == [
        "point",
        "learning-rate",
        "batch-size",
        "state",
        "epochs",
        "test",
        "accuracy",
        "run",
        "directory",
    ]
    assert [line.split()[:3] for line in lines[1:5]] == [
        ["0", "0.05", "25"],
        ["1", "0.05", "50"],
        ["2", "0.1", "25"],
        ["3", "0.1", "50"],
    ]
    assert "#SBATCH --array=0-3%2" in lines and "#SBATCH --nodes=2" in lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_local_sweep_runs_each_point_after_the_other(small_lmdb, tmp_path):
    proc = dali_launch(
        "--local",
        "--sweep",
        "learning-rate=0.05,0.1",
        "--epochs",
        "1",
        "--platform",
        "cpu",
        "--data-dir",
        str(small_lmdb),
        "--run-root",
        str(tmp_path),
    )
    check_ok(proc)
    (sweep_dir,) = tmp_path.iterdir()
    status = json.loads(dali_launch("sweep", "status", str(sweep_dir), "--json").stdout)
    assert [(r["values"], r["state"], r["epochs"]) for r in status] == [
        ({"learning_rate": 0.05}, "finished", 1),
        ({"learning_rate": 0.1}, "finished", 1),
    ]
    configs = [json.loads(RunPaths(r["run_dir"]).config.read_text())["optimizer"]["learning_rate"] for r in status]
    assert configs == [0.05, 0.1]
    for r in status:  # a point by the name `runs` prints under its sweep
        named = dali_launch("status", Path(r["run_dir"]).name, "--run-root", str(tmp_path))
        check_ok(named)
        assert "finished" in named.stdout and Path(r["run_dir"]).name in named.stdout


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_by_two_sweep_is_one_array_of_four_runs(slurm_env, small_lmdb, tmp_path):
    proc = dali_launch(
        *GRID,
        "--max-parallel",
        "2",
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "--platform",
        "cpu",
        "--epochs",
        "1",
        "--time-min",
        "4",  # a hung element ends at SLURM's limit, and the sweep's own wait (2 waves x 9 min) before the test
        "--data-dir",
        str(small_lmdb),
        "--run-root",
        str(tmp_path),
        env=slurm_env,
        timeout=1200,  # 24 s here; a CI machine once took over 600 s (conftest then shows the queue)
    )
    check_ok(proc)
    (sweep_dir,) = tmp_path.iterdir()
    record = json.loads((sweep_dir / "sweep.json").read_text())
    array = record["array_job_id"]
    script = next((sweep_dir / "submitit").glob(f"{array}_*/*_submission.sh"), None) or next(
        (sweep_dir / "submitit").rglob("*submission.sh")
    )
    assert "#SBATCH --array=0-3%2" in script.read_text().splitlines()
    runs = [RunPaths(p["run_dir"]) for p in record["points"]]
    assert len({p.root for p in runs}) == 4 and all(p.root.parent == sweep_dir for p in runs)
    results = [json.loads(p.result.read_text()) for p in runs]
    assert all(len(set(r["checksums"])) == 1 and len(r["checksums"]) == 2 for r in results)
    specs = [json.loads(p.config.read_text()) for p in runs]
    swept = [(s["optimizer"]["learning_rate"], s["step"]["batch_size"]) for s in specs]
    assert swept == [(0.05, 25), (0.05, 50), (0.1, 25), (0.1, 50)]
    assert [json.loads((p.root / "job.json").read_text())["job_id"] for p in runs] == [f"{array}_{i}" for i in range(4)]
    table = dali_launch("sweep", "status", str(sweep_dir), env=slurm_env)
    check_ok(table)
    rows = table.stdout.splitlines()[1:]
    assert len(rows) == 4 and all(" finished " in row for row in rows), table.stdout
    assert table.stdout == proc.stdout[proc.stdout.index("point  ") :]  # the summary the sweep ended with
    # never more than 2 elements ran at once: SLURM's own record of each element's start and end
    spans = [tuple(line.split()) for line in squeue({**os.environ, **slurm_env}, array, "%S %e").splitlines()]
    assert len(spans) == 4 and max(sum(s <= t < e for s, e in spans) for t, _ in spans) <= 2
