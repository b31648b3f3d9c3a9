"""`--resume RUN`: a run continues from its own directory alone, in the mode it started in.

The run directory knows everything: its configuration (config.toml), who started its tasks
(config.json: `train`, `--local` or SLURM). Flags given beside `--resume` may change what does not
change the training itself (more epochs, timeouts, checkpoint policy, SLURM knobs for the new
submission); any other flag that differs from the run's own value is refused, since the checkpoint
would then continue a different run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dali_launch.launcher import config_file, runs
from dali_launch.launcher.config import RunConfig, SlurmConfig
from dali_launch.launcher.options import Values, build
from dali_launch.trainer.config import ObserveConfig, ResilienceConfig, TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths

COMMAND = {"none": "dali-launch train", "local": "dali-launch --local", "slurm": "dali-launch"}
# What a resumed run may change: how long it trains, how it waits, checkpoints and is scheduled, and
# how fast it reads; never what it computes (model, data, batch, devices, seed, ...).
MAY_CHANGE = frozenset(
    {
        "resume",
        "dry_run",
        "epochs",
        "local_timeout_s",
        "init_timeout_s",
        "heartbeat_timeout_s",
        "barrier_timeout_s",
        "eval_cache_mb",
        "sync_every_steps",
        "cuda_graphs",
        "compile_cache",
        "record_samples",
        "reader_threads",
        "prefetch",
        *(f.name for f in dataclasses.fields(SlurmConfig)),
        *(f.name for f in dataclasses.fields(ResilienceConfig)),
        *(f.name for f in dataclasses.fields(ObserveConfig)),  # what it shows of itself, not what it computes
    }
)
PATHS = {"data_dir", "run_root"}  # compared as absolute paths


@dataclasses.dataclass(frozen=True)
class Resumption:
    run: RunConfig  # the run's own configuration, with the allowed changes
    backend: str  # who started its tasks: none (`train`), local or slurm
    changes: dict  # field name -> new value, for the fields that differ from the run's own

    def describe(self) -> str:
        return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in self.changes.items())


def reopen(values: Values, entry: str) -> Resumption:
    """How to continue the run in `values["resume"]`: its configuration, changed as allowed, and its backend.

    `entry` is the command used: `train` continues only runs it started (one process here); the
    plain command continues any run in its own mode.
    """
    paths = RunPaths(Path(values["resume"]).absolute())
    if not paths.root.is_dir():
        raise UsageError(
            f"--resume {paths.root}: no such run directory; pass one that dali-launch made "
            f"(they are under --run-root, default runs/)"
        )
    if not paths.config.is_file() or not paths.config_toml.is_file():
        raise UsageError(
            f"--resume {paths.root} is not a run directory (no config.json and config.toml); pass one "
            f"that dali-launch made under --run-root"
        )
    runs.check_not_live(paths)
    backend = TaskSpec.load(paths.root).distributed.backend
    if entry == "train" and backend != "none":
        raise UsageError(
            f"--resume {paths.root} was started by `{COMMAND[backend]}`, not `dali-launch train`; "
            f"continue it with `dali-launch --resume {paths.root}`"
        )
    if values.get("local") and "local" in values.given and backend != "local":
        raise UsageError(
            f"--resume {paths.root} was started by `{COMMAND[backend]}`, not on local processes; "
            f"continue it with `dali-launch --resume {paths.root}` (no --local)"
        )
    recorded = config_file.load(str(paths.config_toml))
    changes = _changes(values, recorded, paths.root)
    resumed = {**recorded, **changes, "resume": str(paths.root), "dry_run": bool(values.get("dry_run"))}
    return Resumption(build(RunConfig, resumed), backend, changes)


def _changes(values: Values, recorded: dict, root: Path) -> dict:
    """The given flags that differ from the run's own values: allowed ones, or a UsageError."""
    changes = {}
    for name in sorted(values.given):
        value, before = values[name], recorded.get(name)
        if value == before or name in ("resume", "dry_run") or (name in PATHS and _same_path(value, before)):
            continue
        if name not in MAY_CHANGE:
            flag = "--" + name.replace("_", "-")
            raise UsageError(
                f"{flag} {value} differs from the run's own {before} and would make --resume {root} "
                f"another run; leave {flag} out to continue it, or start a new run"
            )
        changes[name] = value
    return changes


def _same_path(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a).resolve() == Path(b).resolve()
