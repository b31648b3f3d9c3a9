"""A run directory's files cut short or garbled (a disk that filled during an append, a careless edit):
`status`, `runs` and `--resume` read around them, say which file in one line, and go on. One real `train`
run made once; each test damages its own copy."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import check_ok, dali_launch
from run_readers import only_run

from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths

WARNING = "dali-launch: warning: "


@pytest.fixture(scope="module")
def whole(small_lmdb, tmp_path_factory) -> RunPaths:
    """A finished 2-epoch `train` run on 800 digits, with its checkpoints."""
    root = tmp_path_factory.mktemp("whole")
    check_ok(
        dali_launch("train", "--data-dir", str(small_lmdb), "--epochs", "2", "--name", "w", "--run-root", str(root))
    )
    return only_run(root)


def copy_of(whole: RunPaths, root, name: str) -> RunPaths:
    return RunPaths(shutil.copytree(whole.root, root / name, symlinks=True))


def cut_last_line(path) -> None:
    """The last line of a JSON-lines file cut short, as a disk that fills during the append leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])


def test_status_and_runs_read_around_damaged_files_and_name_them(whole, tmp_path):
    """Each damaged file is one line (`runs`: on stderr; `status`: in its line), every run still listed."""
    root = tmp_path / "runs"
    torn, garbled = copy_of(whole, root, "torn-20261201-120000"), copy_of(whole, root, "garbled-20261201-120000")
    cut_last_line(torn.metrics)
    for path in (garbled.launch, garbled.ending(0), garbled.rank_map):
        path.write_text("garbage{")
    garbled.metrics.write_text('{"epoch": 0, "test_accuracy": 0.5}\nnot json\n' + whole.metrics.read_text())
    (root / "sweep-20261201-120000").mkdir()
    (root / "sweep-20261201-120000" / "sweep.json").write_text("")

    listed = dali_launch("runs", str(root), "--json")
    check_ok(listed)
    assert [row["run"] for row in json.loads(listed.stdout)] == [garbled.root.name, torn.root.name]
    assert sorted(listed.stderr.splitlines()) == sorted(
        [
            f"{WARNING}{garbled.ending(0)} is damaged (Expecting value at byte 0 of 8); read as missing",
            f"{WARNING}{garbled.launch} is damaged (Expecting value at byte 0 of 8); read as missing",
            f"{WARNING}{garbled.metrics} is damaged (line 2 is no JSON object); left it out",
            f"{WARNING}{torn.metrics} has its last line (line 2) cut short; left it out",
            f"{WARNING}{root}/sweep-20261201-120000/sweep.json is damaged (empty); its points are still there: pass "
            "one's run directory",
        ]
    ), listed.stderr
    table = dali_launch("runs", str(root))
    check_ok(table)
    assert torn.root.name in table.stdout and garbled.root.name in table.stdout

    status = dali_launch("status", str(torn.root))
    check_ok(status)
    assert status.stdout.startswith(
        f"run {torn.root.name}: finished; epoch 0 test accuracy "
    ) and status.stdout.endswith(f"; {torn.metrics} has its last line (line 2) cut short; left it out\n"), status.stdout
    assert status.stderr == ""
    status = dali_launch("status", str(garbled.root))
    check_ok(status)
    assert f"; {garbled.ending(0)} is damaged (Expecting value at byte 0 of 8); read as missing" in status.stdout


def test_resume_reads_around_a_torn_metrics_line_and_a_garbled_rank_map(whole, tmp_path):
    """The torn epoch's line is left out (the epochs after the checkpoint are written again), said once."""
    paths = copy_of(whole, tmp_path, "torn-20261201-120000")
    cut_last_line(paths.metrics)
    paths.rank_map.write_text("[")
    resumed = dali_launch("train", "--resume", str(paths.root), "--epochs", "3")
    check_ok(resumed)
    assert [line for line in resumed.stderr.splitlines() if line.startswith(WARNING)] == [
        f"{WARNING}{paths.rank_map} is damaged (Expecting value at byte 1 of 1); read as missing",
        f"{WARNING}{paths.metrics} has its last line (line 2) cut short; left it out",
    ], resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert [json.loads(line)["epoch"] for line in paths.metrics.read_text().splitlines()] == [0, 2]


@pytest.mark.parametrize("damaged", ["config.json", "job.json"])
def test_resume_of_a_run_whose_own_record_is_damaged_is_one_line(whole, tmp_path, damaged):
    """Without its settings, or without knowing whether its SLURM job still runs, a run cannot go on."""
    paths = copy_of(whole, tmp_path, "garbled-20261201-120000")
    (paths.root / damaged).write_text('{"job_id": ')
    refused = dali_launch("--resume", str(paths.root), "--epochs", "3")
    why = {
        "config.json": f"its config.json is damaged (Expecting value at byte 11 of 11), and a run goes on from its "
        f"settings; start a new run with them instead: --config {paths.config_toml}",
        "job.json": f"its job.json is damaged (Expecting value at byte 11 of 11), so whether its SLURM job still runs "
        f"is unknown; check `squeue --me`, then remove {paths.job} and resume again",
    }[damaged]
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"dali-launch: error: --resume {paths.root}: {why}"
    ], refused.stderr


def test_the_line_that_sets_a_damaged_checkpoint_aside_goes_to_stderr(whole, tmp_path):
    """A warning like the others: stdout keeps the run's own lines (the resume, the epochs, the summary)."""
    paths = copy_of(whole, tmp_path, "cut-20261201-120000")
    steps = saved.complete_steps(paths)
    newest = paths.checkpoints / str(steps[-1])
    victim = max((f for f in newest.rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
    size = victim.stat().st_size
    with victim.open("r+b") as f:
        f.truncate(size // 2)
    resumed = dali_launch("train", "--resume", str(paths.root), "--epochs", "3")
    check_ok(resumed)
    line = (
        f"checkpoint step {steps[-1]} is damaged ({victim.relative_to(newest)} is {size // 2:,} of its {size:,} "
        f"bytes); kept it as {newest}.damaged, resuming from step {steps[-2]}"
    )
    assert f"dali-launch: {line}" in resumed.stderr.splitlines(), resumed.stderr
    assert "is damaged" not in resumed.stdout and f"resumed from checkpoint {steps[-2]}:" in resumed.stdout


@pytest.mark.parametrize("written_by", ["this version", "a version that marked none", "a version before records"])
def test_a_checkpoint_without_its_file_record_is_damaged_unless_written_before_records(whole, tmp_path, written_by):
    """The newest checkpoint loses dali_launch_files.json (a careless copy): it was taken as whole, unchecked.
    Now it is damaged, known by its own metadata or, where that does not say (a version that wrote records
    without saying so), by the run's older checkpoint's record; only a run written before records goes on
    from it, checked for its metadata alone."""
    paths = copy_of(whole, tmp_path, "unrecorded-20261201-120000")
    steps = saved.complete_steps(paths)
    dropped = steps if written_by == "a version before records" else steps[-1:]
    for step in dropped:
        (paths.checkpoints / str(step) / saved.FILES).unlink()
        if written_by != "this version":
            meta = paths.checkpoints / str(step) / "meta" / "metadata"
            meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != saved.RECORDED}))
    newest, damaged = saved.newest_whole(paths, rename=True)
    if written_by == "a version before records":
        assert newest.step == steps[-1] and not damaged
        return
    assert newest.step == steps[-2] and [(d.step, d.what) for d in damaged] == [
        (steps[-1], f"its file record {saved.FILES} is missing")
    ]
    assert (paths.checkpoints / f"{steps[-1]}.damaged").is_dir()
