"""Executor: runs of one mode, with settings kept between submissions, as submitit's executors keep theirs.

    executor = Executor("local", gpus_per_node=2, processes=2)   # Executor(): the mode picked from where it runs
    executor.update(epochs=3)                                    # any CLI setting, by its field name
    job = executor.submit(model=MyModel)                         # checked, written, started; returns at once
    jobs = executor.map_array(learning_rate=[0.05, 0.1, 0.2])    # three runs in one call, as submitit's map_array

A submission is the CLI's new run: the settings become the run's configuration through the CLI's own functions
(options.settled, run_flags.from_flags), then the same preparation (route/prepare.py: every check, then the run
directory) and the backend's start (route/launch.submit_array), so the same settings give the same run directory.
Several runs in one call are checked together before any is written, each a run directory of its own: on SLURM
one job array, as --sweep submits one; here and local one after another, as --sweep runs them with --local.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

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
        return self.submit_array([given])[0]

    def submit_array(self, runs: Iterable[dict]) -> list[Job]:
        """Several new runs in one call, one per dict of settings (each over the executor's, as `submit`'s given):
        every run checked before any is written, each a run directory of its own, then started -- on SLURM as one
        job array, here and local one after another. Their handles, in order."""
        given = list(runs)
        if not given or not all(isinstance(settings, dict) for settings in given):
            raise UsageError("submit_array takes a list of dicts of settings, one per run, e.g. [{'epochs': 1}]")
        sent_objects.forget()  # a new submission: what an earlier one sent is not its own
        configs = [self._config(settings) for settings in given]
        _one_job_shape(configs)
        try:
            started = launch.submit_array(configs, backend_of(self.mode))
        except UsageError as e:  # the CLI's checks name an object sent by value as the run records it
            raise UsageError(sent_objects.in_callers_words(str(e))) from None
        return [Job(job, self.mode) for job in started]

    def map_array(self, **columns) -> list[Job]:
        """submitit's map_array for settings: each keyword a list of values, one per run, all as long;
        `map_array(learning_rate=[0.05, 0.1], batch_size=[32, 64])` is two runs. As submit_array otherwise."""
        lengths = {name: len(values) for name, values in columns.items() if isinstance(values, (list, tuple))}
        if not columns or len(lengths) < len(columns):
            name = next((n for n in columns if n not in lengths), "learning_rate")
            raise UsageError(f"map_array takes lists, one value per run: e.g. map_array({name}=[0.05, 0.1, 0.2])")
        if len(set(lengths.values())) > 1:
            said = ", ".join(f"{name} {n}" for name, n in lengths.items())
            raise UsageError(f"map_array's lists are one value per run, so as long as each other; given {said}")
        return self.submit_array([dict(zip(columns, values)) for values in zip(*columns.values())])

    def run_config(self, **given) -> RunConfig:
        """The run's configuration, as the CLI makes it from the same settings; a model, pipeline or task given as
        an object is named as the run will record it (sent_objects.py)."""
        sent_objects.forget()
        return self._config(given)

    def _config(self, given: dict) -> RunConfig:
        values = {**self.settings, **checked(self.mode, given)}
        values = {k: reference(k, v) if k in OBJECTS else v for k, v in values.items()}
        config = values.pop(CONFIG, None)
        if self.mode == "local":
            values["local"] = True  # as --local is given
        every = settled({**defaults(self.mode), **values}, set(values), config, classes(self.mode))
        check_file(self.mode, every, config)
        return from_flags(every)


def _one_job_shape(runs: list[RunConfig]) -> None:
    """The runs of one call share the job's shape and where it runs (their names aside), as a sweep's points do:
    a SLURM job array has one shape."""
    shape = lambda run: {
        **dataclasses.asdict(dataclasses.replace(run.launch, name="")),
        **dataclasses.asdict(run.slurm),
    }
    first = shape(runs[0])
    for i, run in enumerate(runs[1:], 1):
        ours = shape(run)
        key = next((k for k, v in ours.items() if v != first[k]), None)
        if key is not None:
            raise UsageError(
                f"run {i} of one call sets {key}={ours[key]!r}, run 0 {key}={first[key]!r}; the runs of one call "
                f"share the job's shape and where it runs: give {key} to the Executor, or submit that run on its own"
            )
