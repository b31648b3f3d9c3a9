"""What every backend does, and how a job ended.

The preparation path (launcher/prepare.py) asks a backend for its own checks and for what a dry run
shows; the launch (launcher/launch.py) starts the tasks, waits and reports. A backend never decides
anything the run's configuration already says.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dali_launch.launcher.config import RunConfig
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths


@dataclass
class Outcome:
    """How a job ended: ok (its result.json holds the result), else a message and an exit code."""

    ok: bool
    message: str = ""
    code: int = 1  # what the command exits with when not ok
    report: bool = True  # print the result's summary (one task of several leaves that to process 0)


class Backend:
    """One launch mode. `spec_name` is the name the tasks read their rank from (config.json), and
    `started_by` the command a user recognises that mode by (--resume's messages name it)."""

    name: str
    spec_name: str
    started_by: str

    def check(self, run: RunConfig) -> None:
        """Checks of this mode's own, before anything is written: one UsageError each."""

    def plan(self, run: RunConfig, run_dir: Path, spec_json: str) -> str:
        """What a dry run prints besides the rank map: by default the task spec."""
        return spec_json

    def make_run_dir(self, run: RunConfig, data_dir: Path) -> RunPaths:
        """A new run's directory; by default a new, time-stamped one (launcher/runs.py)."""
        from dali_launch.launcher.route import directory

        return directory.create(run, data_dir, self.spec_name)

    def start(self, run: RunConfig, paths: RunPaths) -> None:
        raise NotImplementedError

    def wait(self) -> Outcome:
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError


def refuse_node_range(run: RunConfig, mode: str) -> None:
    """Only SLURM picks a node count at each start; elsewhere the count is the one given."""
    if run.nodes_vary:
        raise UsageError(
            f"--nodes {run.launch.nodes} is a range for SLURM to pick from, but {mode} runs a fixed count; "
            f"give one count, e.g. --nodes {run.node_range[0]}"
        )
