"""`--resume RUN`: a run continues from its own directory alone, in the mode it started in.

The run directory knows everything: its configuration (config.toml), who started its tasks
(config.json: `train`, `--local` or SLURM). Flags given beside `--resume` may change what does not
change the training itself (more epochs, timeouts, checkpoint policy, SLURM knobs for the new
submission); any other flag that differs from the run's own value is refused, since the checkpoint
would then continue a different run. A --sample-order global run may also change its topology
(nodes, GPUs, processes, readers): its checkpoint holds a position in a global order, which
trainer/resilience/elastic.py continues on any device count (checked here, before anything is written).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from dali_launch.launcher import backends, config_file, runs
from dali_launch.launcher.config import RunConfig, SlurmConfig
from dali_launch.launcher.options import Values, build
from dali_launch.trainer.config import ObserveConfig, ResilienceConfig, TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths

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
        "feed_workers",
        "prefetch",
        *(f.name for f in dataclasses.fields(SlurmConfig)),
        *(f.name for f in dataclasses.fields(ResilienceConfig)),
        *(f.name for f in dataclasses.fields(ObserveConfig)),  # what it shows of itself, not what it computes
    }
)
PATHS = {"data_dir", "run_root", "init_from"}  # compared as absolute paths
# What a --sample-order global run may change besides: where it runs, and how a resized batch is handled.
ELASTIC = frozenset({"nodes", "gpus_per_node", "tasks_per_node", "readers_per_device", "elastic_batch"})


@dataclasses.dataclass(frozen=True)
class Resumption:
    run: RunConfig  # the run's own configuration, with the allowed changes
    backend: str  # who started its tasks: none (`train`), local or slurm
    changes: dict  # field name -> new value, for the fields that differ from the run's own
    elastic: str = ""  # how a global order continues on another device count (elastic.Plan.describe)

    def describe(self) -> str:
        changed = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in self.changes.items())
        return changed + (f" ({self.elastic})" if self.elastic else "")


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
    started_by = backends.create(backend).started_by
    if entry == "train" and backend != "none":
        raise UsageError(
            f"--resume {paths.root} was started by `{started_by}`, not `dali-launch train`; "
            f"continue it with `dali-launch --resume {paths.root}`"
        )
    if values.get("local") and "local" in values.given and backend != "local":
        raise UsageError(
            f"--resume {paths.root} was started by `{started_by}`, not on local processes; "
            f"continue it with `dali-launch --resume {paths.root}` (no --local)"
        )
    recorded = config_file.load(str(paths.config_toml))
    changes = _changes(values, recorded, paths.root)
    resumed = {**recorded, **changes, "resume": str(paths.root), "dry_run": bool(values.get("dry_run"))}
    run = build(RunConfig, resumed)
    plan = _elastic_plan(run, paths) if run.data.sample_order == "global" else None
    return Resumption(run, backend, changes, plan.describe() if plan else "")


def _changes(values: Values, recorded: dict, root: Path) -> dict:
    """The given flags that differ from the run's own values: allowed ones, or a UsageError."""
    changes, elastic = {}, recorded.get("sample_order") == "global"
    for name in sorted(values.given):
        value, before = values[name], recorded.get(name)
        if value == before or name in ("resume", "dry_run") or (name in PATHS and _same_path(value, before)):
            continue
        flag = "--" + name.replace("_", "-")
        if name in ELASTIC and not elastic:
            raise UsageError(
                f"{flag} {value} differs from the run's own {'default' if before is None else before}, but "
                f"--resume {root} reads its data in "
                f"per-device shards (--sample-order shards), whose checkpoint holds each reader's position; "
                f"leave {flag} out to continue it (only --sample-order global runs resume on another topology)"
            )
        if name not in MAY_CHANGE | (ELASTIC if elastic else frozenset()):
            raise UsageError(
                f"{flag} {value} differs from the run's own {before} and would make --resume {root} "
                f"another run; leave {flag} out to continue it, or start a new run"
            )
        changes[name] = value
    return changes


def _elastic_plan(run: RunConfig, paths: RunPaths):
    """How the newest checkpoint continues on `run`'s devices (None without one), and that its data
    set is still the one at --data-dir; a UsageError otherwise, before anything is written."""
    from dali_launch.trainer.data import records
    from dali_launch.trainer.resilience import elastic

    order = newest_order(paths)
    if order is None:
        return None
    # A --nodes range: SLURM picks the count when the job starts; every count it may pick must continue.
    plans = [elastic.plan(order, d, run.train.elastic_batch, run.train.accumulate_steps) for d in run.device_counts]
    plan = None if run.nodes_vary else plans[0]
    data_dir = TaskSpec.load(paths.root).data.data_dir
    now = records.fingerprint_of(Path(data_dir) / "training")
    if now is not None and now != order["dataset"]:
        raise UsageError(
            f"--resume {paths.root}: its checkpoint was written for a training set of {order['dataset']['samples']} "
            f"samples (keys {order['dataset']['keys_sha256'][:12]}), but {data_dir} now holds {now['samples']} "
            f"(keys {now['keys_sha256'][:12]}); restore the run's data there, or start a new run"
        )
    return plan


def newest_order(paths: RunPaths) -> dict | None:
    """The global-order record of the newest complete checkpoint (Orbax's JSON, read without Orbax)."""
    steps = [p for p in paths.checkpoints.glob("*") if p.name.isdigit() and (p / "commit_success.txt").exists()]
    if not steps:
        return None
    newest = max(steps, key=lambda p: int(p.name))
    return json.loads((newest / "meta" / "metadata").read_text()).get("order")


def _same_path(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a).resolve() == Path(b).resolve()
