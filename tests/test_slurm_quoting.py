"""Hostile strings -- spaces, quotes, `;`, `$(...)`, backticks, `#`, `&`, `|`, `>`, `*` -- reach SLURM as data.

submitit writes every value shell-quoted into the batch script; bash runs the script, and sbatch reads
its `#SBATCH` lines with a parser of its own. Three checks, from cheap to real: bash hands srun the
exact arguments (a fake srun records them; no SLURM), sbatch reads the #SBATCH values back exactly (a
held job on the local cluster; scontrol shows them; nothing runs), and one real job whose run
directory and data set live under hostile paths. Every `$(touch MARK)` must leave no MARK behind.
What no quoting carries (a newline; a backslash or `%` in #SBATCH values) is refused before anything
is written: see test_catalogue_jobs.py. --setup lines are shell by design: they run as written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import check_ok, dali_launch
from run_readers import only_run

from dali_launch.launcher.cli import main


def _hostile(marks: Path) -> str:
    """One path segment (well, several: the command substitutions hold absolute paths) a shell would run."""
    return f"x y'\"; $(touch {marks}/pwned) `touch {marks}/pwned2` # & | > *é"


def _args(tmp: Path, marks: Path, data_dir: Path) -> tuple[list[str], dict]:
    root = f"{tmp}/{_hostile(marks)}/runs"
    want = {
        "root": root,
        "srun": f"--comment=a b;$(touch {marks}/pwned3)",
        "comment": f"c d'\"$(touch {marks}/pwned4) `touch {marks}/pwned5`",
    }
    args = [
        "--nodes",
        "1",
        "--platform",
        "cpu",
        "--data-dir",
        str(data_dir),
        "--run-root",
        root,
        "--srun-arg",
        want["srun"],
        "--sbatch-arg",
        f"comment={want['comment']}",
    ]
    return args, want


def _dry_run_script(capsys, args: list[str]) -> str:
    assert main([*args, "--dry-run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    return out[out.index("#!/bin/bash") :]


def test_bash_hands_srun_the_exact_arguments(capsys, tmp_path, mnist_lmdb):
    marks = tmp_path / "marks"
    marks.mkdir()
    args, want = _args(tmp_path, marks, mnist_lmdb)
    setup = f'echo "setup is shell: $((6 * 7))" > {tmp_path}/setup.out'  # by design, and documented
    script = tmp_path / "job.sh"
    script.write_text(_dry_run_script(capsys, [*args, "--setup", setup]))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nprintf "%s\\0" "$@" > "$SRUN_ARGV"\n')
    (fake / "srun").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SRUN_ARGV": str(tmp_path / "argv")}
    subprocess.run(["bash", str(script)], check=True, timeout=60, cwd=tmp_path, env=env)

    argv = (tmp_path / "argv").read_bytes().decode().split("\0")[:-1]
    folder = f"{want['root']}/RUN_DIR/submitit/%j"
    assert argv[:5] == ["--unbuffered", "--output", f"{folder}/%j_%t_log.out", "--error", f"{folder}/%j_%t_log.err"]
    assert want["srun"] in argv
    assert argv[-5:] == [sys.executable, "-u", "-m", "submitit.core._submit", folder]
    assert (tmp_path / "setup.out").read_text() == "setup is shell: 42\n"
    assert not any(marks.iterdir()), "a hostile string ran as a shell command"
    assert not Path(want["root"]).exists(), "a dry run wrote a run directory"


@pytest.mark.slurm
def test_sbatch_reads_the_directives_as_data(capsys, tmp_path, mnist_lmdb, slurm_env, monkeypatch):
    """The dry run's script, submitted held: SLURM's own view of its #SBATCH values is the values."""
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    marks = tmp_path / "marks"
    marks.mkdir()
    args, want = _args(tmp_path, marks, mnist_lmdb)
    script = tmp_path / "job.sh"
    script.write_text(_dry_run_script(capsys, args))
    job_id = subprocess.run(
        ["sbatch", "--hold", "--parsable", str(script)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        cwd=tmp_path,
    ).stdout.strip()
    try:
        shown = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    finally:
        subprocess.run(["scancel", job_id], timeout=30)
    fields = dict(
        line.strip().split("=", 1)
        for line in shown.splitlines()
        if line.strip().startswith(("StdOut=", "StdErr=", "Comment="))
    )
    folder = f"{want['root']}/RUN_DIR/submitit/{job_id}"
    assert fields == {
        "StdOut": f"{folder}/{job_id}_0_log.out",
        "StdErr": f"{folder}/{job_id}_0_log.err",
        "Comment": want["comment"],
    }
    assert not any(marks.iterdir()), "a hostile string ran as a shell command"


@pytest.mark.slurm
@pytest.mark.slow
def test_a_job_under_hostile_paths_runs(tmp_path, small_lmdb, slurm_env):
    """One real submission: run directory, data set, srun and sbatch values all hostile; the job trains."""
    marks = tmp_path / "marks"
    marks.mkdir()
    data = tmp_path / f"data {_hostile(marks)}"
    data.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(small_lmdb, data)
    args, want = _args(tmp_path, marks, data)
    proc = dali_launch(*args, "--epochs", "1", "--time-min", "10", env=slurm_env, timeout=600)
    check_ok(proc)
    paths = only_run(Path(want["root"]))
    assert json.loads(paths.result.read_text())["final"]["train_samples"] == 800
    assert json.loads(paths.config.read_text())["data"]["data_dir"] == str(data)
    assert not any(marks.iterdir()), "a hostile string ran as a shell command"
