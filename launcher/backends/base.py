"""What every backend does, and how a run ended.

The route (launcher/route/) asks a backend for its own checks, for what a dry run shows and for a new
run's directory, then to run each run: start its tasks and wait for their end (the CLI), or start them
and return their jobs (`start`: the Python API, as submitit's `submit` and `map_array`). A backend that submits arrays
(SLURM) takes a sweep's runs as one job array; the others run them one after another. After the start,
`attach` gives the run's job handle (backends/job.py). A backend never decides anything the run's
configuration already says.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dali_launch.launcher.backends.job import BackendJob, LocalJob, RunState
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths


@dataclass(frozen=True)
class Outcome:
    """How a run ended (or stands, once a detached submission returned), what to say, the exit code."""

    state: RunState
    message: str = ""
    code: int = 0  # what the command exits with
    report: bool = True  # print the result's summary (one task of several leaves that to process 0)

    @property
    def ok(self) -> bool:
        return self.state is RunState.FINISHED


class Watch:
    """What the route hears while runs go: a sweep records and says each point; one run needs none of it."""

    def submitted(self, job_ids: list[str]) -> None:
        """sbatch took the runs (one job array)."""

    def starting(self, index: int) -> None:
        """Run `index` starts (runs that go one after another)."""

    def ended(self, index: int, outcome: Outcome) -> None:
        """Run `index` ended."""


class Backend:
    """One launch mode. `name` is the mode, `spec_name` the environment table its tasks read their rank
    from (config.json records it), `started_by` the command a user knows the mode by (--resume says it)."""

    name: str
    spec_name: str
    started_by: str
    arrays = False  # several runs go as one job array (SLURM), not one after another
    process_id = 0  # this process's task, where it is one task of the run (allocation.py)

    def check(self, run: RunConfig) -> None:
        """Checks of this mode's own, before anything is written: one UsageError each."""

    def dry_run(self, runs: list[RunConfig], run_dirs: list[Path], specs: list[str]) -> str:
        """What a dry run prints besides the rank map: by default one run's task spec."""
        return specs[0] if len(runs) == 1 else ""

    def make_run_dir(self, run: RunConfig, data_dir: Path) -> RunPaths:
        """A new run's directory; by default a new, time-stamped one (route/directory.py)."""
        from dali_launch.launcher.route import directory

        return directory.create(run, data_dir, self.spec_name)

    def reopen_run_dir(self, run: RunConfig, data_dir: Path, changed: bool) -> RunPaths:
        """A resumed run's directory, rewritten where the resumption changed it (route/directory.py)."""
        from dali_launch.launcher.route import directory

        return directory.resume(run, data_dir, self.spec_name, changed)

    def run(self, run: RunConfig, paths: RunPaths) -> Outcome:
        """Starts the run's tasks and waits for their end."""
        raise NotImplementedError

    def start(self, runs: list[RunConfig], paths: list[RunPaths]) -> list[BackendJob]:
        """Starts the runs' tasks and returns their jobs, not waiting: by default a follower process of its own
        runs this backend for each prepared run directory, several one after another (backends/detached.py)."""
        from dali_launch.launcher.backends import detached

        return detached.start(self, runs, paths)

    def run_array(self, runs: list[RunConfig], paths: list[RunPaths], watch: Watch) -> list[Outcome]:
        """Several runs as one job array (where `arrays`)."""
        raise NotImplementedError

    def attach(self, paths: RunPaths) -> BackendJob:
        """The job of a run this mode started: by default processes on this host."""
        return LocalJob(paths)


def refuse_node_range(run: RunConfig, mode: str) -> None:
    """Only SLURM picks a node count at each start; elsewhere the count is the one given."""
    if run.nodes_vary:
        raise UsageError(
            f"--nodes {run.launch.nodes} is a range for SLURM to pick from, but {mode} runs a fixed count; "
            f"give one count, e.g. --nodes {run.node_range[0]}"
        )
