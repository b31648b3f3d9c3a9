"""A machine without SLURM's commands (a laptop, a login node without them): a dry run still shows
the exact batch script; a real submission is one clear line."""

from __future__ import annotations

from conftest import check_ok, dali_launch

JOB = ["--nodes", "2", "--gpus-per-node", "8"]


def test_a_dry_run_needs_no_slurm(tmp_path, mnist_lmdb):
    (tmp_path / "bin").mkdir()
    proc = dali_launch(
        *JOB,
        "--dry-run",
        "--data-dir",
        str(mnist_lmdb),
        "--run-root",
        str(tmp_path / "runs"),
        env={"PATH": str(tmp_path / "bin")},
    )
    check_ok(proc)
    assert "#SBATCH --nodes=2" in proc.stdout and "#SBATCH --gpus-per-node=8" in proc.stdout
    assert "srun " in proc.stdout and "2 processes on 2 nodes, 8 devices each, 16 devices in all" in proc.stdout
    assert "DALI readers per device resolved by each task" in proc.stdout  # devices are not shards
    assert not (tmp_path / "runs").exists()


def test_a_submission_without_slurm_is_one_line(tmp_path, mnist_lmdb):
    (tmp_path / "bin").mkdir()
    proc = dali_launch(
        *JOB, "--data-dir", str(mnist_lmdb), "--run-root", str(tmp_path / "runs"), env={"PATH": str(tmp_path / "bin")}
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        "dali-launch: error: sbatch is not on PATH; submit from a machine "
        "with SLURM's commands (a login node), or run here with --local\n",
    )
    assert not (tmp_path / "runs").exists()
