"""What the cluster-CI test job runs on its node: pytest, writing its own JUnit XML."""

from __future__ import annotations

import os
import subprocess
import sys


def run_pytest(checkout: str, targets: list[str], junit: str, args: list[str], timeout_s: int) -> dict:
    """Runs pytest on `targets` in `checkout`; returns its exit code and output tail.

    The job's SLURM_* variables are dropped: tests that submit jobs of their own must not inherit
    this job's task layout (sbatch and srun read SLURM_* as defaults).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SUBMITIT_"))}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *targets, f"--junitxml={junit}", "-p", "no:cacheprovider", *args],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as e:
        return {"exit_code": 124, "output_tail": f"pytest still running after {timeout_s} s: {e}"}
    print(proc.stdout, proc.stderr, sep="\n", flush=True)  # lands in the job's log
    return {"exit_code": proc.returncode, "output_tail": (proc.stdout + proc.stderr)[-3000:]}
