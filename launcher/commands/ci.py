"""`dali-launch ci`: cluster CI, a run with the test suite's job beside it (ci/cluster_ci.py)."""

from __future__ import annotations

import sys

from dali_launch.launcher.ci.cluster_ci import CiConfig
from dali_launch.launcher.options import build, config_options
from dali_launch.launcher.run_config import RUN_OPTIONS, Panel
from dali_launch.launcher.run_flags import from_flags
from dali_launch.trainer.errors import UsageError


@config_options(*RUN_OPTIONS, Panel("CI", (CiConfig,)))
def ci(values: dict):
    """Cluster CI: submit the test suite and a one-epoch multi-node training run, wait, write JUnit XML."""
    from dali_launch.launcher.ci import cluster_ci

    if values["local"]:
        raise UsageError(
            "`dali-launch ci` runs the tests and a training job on a SLURM cluster, so it has no --local; "
            "here, run the tests with `python -m pytest` and a local job with `dali-launch --local ...`"
        )
    values = {**values, "epochs": values["epochs"] if "epochs" in values.given else 1}  # CI: one epoch by default
    sys.exit(cluster_ci.run_ci(from_flags(values), build(CiConfig, values)))
