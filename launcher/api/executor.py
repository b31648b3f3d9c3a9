"""Executor: runs of one mode, with settings kept between submissions, as submitit's executors keep theirs.

    executor = Executor("local", gpus_per_node=2, processes=2)   # Executor(): the mode picked from where it runs
    executor.update(epochs=3)                                    # any CLI setting, by its field name
    job = executor.submit(model=MyModel)                         # checked, written, started; returns at once

A submission is the CLI's new run: the settings become the run's configuration through the CLI's own functions
(options.settled, run_flags.from_flags), then the same preparation (route/prepare.py: every check, then the run
directory) and the backend's start (route/launch.submit), so the same settings give the same run directory.
"""

from __future__ import annotations

from dali_launch.launcher.api.handle import Job
from dali_launch.launcher.api.modes import backend_of, check_mode, pick
from dali_launch.launcher.api.objects import reference
from dali_launch.launcher.api.settings import CONFIG, OBJECTS, check_file, checked, classes, defaults
from dali_launch.launcher.console import echo
from dali_launch.launcher.options import settled
from dali_launch.launcher.route import launch, sent_objects
from dali_launch.launcher.run_config import RunConfig
from dali_launch.launcher.run_flags import from_flags
from dali_launch.trainer.errors import UsageError


class Executor:
    """Where runs go -- "here" (one process on this machine, as `dali-launch train`), "local" (the job's processes
    on this machine, as `dali-launch --local`) or "slurm" (a SLURM job, as `dali-launch`); none given: picked from
    where it runs (api/modes.py), kept in `picked` with the reason and said -- and their settings."""

    def __init__(self, mode: str | None = None, **given):
        self.picked: str | None = None  # why the mode was picked, where none was given
        if mode is None:
            mode, self.picked = pick()
            echo(f"Executor(): mode {mode!r} ({self.picked}); name a mode to choose: 'here', 'local' or 'slurm'")
        self.mode = check_mode(mode)
        self.settings: dict = {}
        self.update(**given)

    def __repr__(self) -> str:
        return f"Executor({self.mode!r}, {', '.join(f'{k}={v!r}' for k, v in self.settings.items())})"

    def update(self, **given) -> None:
        """Settings for every later submission: the CLI's, by field name (`config`: a --config file)."""
        self.settings |= checked(self.mode, given)

    def submit(self, **given) -> Job:
        """A new run of the executor's settings and `given` (these for this run alone): checked, its run directory
        written and its tasks started; returns at once with the run's handle. A bad setting is a UsageError, raised
        before anything is written or started."""
        run = self.run_config(**given)
        try:
            started = launch.submit(run, backend_of(self.mode))
        except UsageError as e:  # the CLI's checks name an object sent by value as the run records it
            raise UsageError(sent_objects.in_callers_words(str(e))) from None
        return Job(started, self.mode)

    def run_config(self, **given) -> RunConfig:
        """The run's configuration, as the CLI makes it from the same settings; a model, pipeline or task given as
        an object is named as the run will record it (sent_objects.py)."""
        values = {**self.settings, **checked(self.mode, given)}
        sent_objects.forget()
        values = {k: reference(k, v) if k in OBJECTS else v for k, v in values.items()}
        config = values.pop(CONFIG, None)
        if self.mode == "local":
            values["local"] = True  # as --local is given
        every = settled({**defaults(self.mode), **values}, set(values), config, classes(self.mode))
        check_file(self.mode, every, config)
        return from_flags(every)
