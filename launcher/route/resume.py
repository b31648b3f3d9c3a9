"""`--resume RUN`: a run continues from its own directory alone, in the mode it started in; decided here, once.

The run directory knows everything: its configuration (config.toml), who started its tasks (config.json:
`train`, `--local` or SLURM), its checkpoints. Flags given beside `--resume` may change what their
field's `on_resume` metadata allows (trainer/config.py's `opt`): how long it trains, how it waits,
checkpoints and is scheduled, how fast it reads, and where it runs ("elastic": either sample order; a
shard-order checkpoint of an earlier version only on its own topology). Any other flag that differs
from the run's own value is refused: the checkpoint would then continue a different run. Whether the
newest checkpoint can go on as asked (elastic.py's batch rules, the data set's fingerprint) is the
trainer's rule, asked of start_point.check_resume, before anything is written.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from dali_launch.launcher import config_file
from dali_launch.launcher.backends import registry
from dali_launch.launcher.backends.job import lock_holder, read_record, spec_of
from dali_launch.launcher.console import echo, error
from dali_launch.launcher.options import Values, build
from dali_launch.launcher.route.machine_checks import folder_problem
from dali_launch.launcher.run_config import RunConfig, counted, marked, task_spec, with_devices
from dali_launch.trainer.entry_points import SUBMISSION
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import saved, start_point
from dali_launch.trainer.run_dir import RunPaths, parse_json, read_json, read_jsonl, take_notes


@dataclasses.dataclass(frozen=True)
class Resume:
    run: RunConfig  # the run's own configuration, with the allowed changes
    backend: str  # the mode that started its tasks: train, local or slurm
    changes: dict  # field name -> new value, for the fields that differ from the run's own
    elastic: str = ""  # how a global order continues on another device count (elastic.Plan.describe)

    def describe(self) -> str:
        changed = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in self.changes.items())
        return changed + (f" ({self.elastic})" if self.elastic else "")


def read(values: Values, entry: str, lead: bool = True) -> Resume:
    """How to continue the run in `values["resume"]`: its configuration, changed as allowed, and its mode.

    `entry` is the command used: `train` continues only runs it started (one process here), `task` only
    runs whose tasks SLURM started; the plain command continues any run in its own mode. `lead`: this
    process asks whether the run is live and repairs its checkpoints (the other tasks of a step do not:
    task 0 may have started the trainer, and its lock, by then).
    """
    paths = run_dir_of(values["resume"], values.get("run_root") or "runs")
    check_writable(paths)
    SUBMISSION.read(paths.objects)  # what the Python API sent by value: the checks load it as the tasks do
    if lead:
        refuse_live(paths)
    spec = spec_of(paths)  # config.json, read this once
    if spec is None:
        why = parse_json(paths.config)[1] or "not a task spec this version reads"
        raise UsageError(
            f"--resume {paths.root}: its config.json is damaged ({why}), and a run goes on from its settings; "
            f"start a new run with them instead: --config {paths.config_toml}"
        )
    mode = registry.kind(spec.layout.backend)
    _check_entry(values, entry, paths, mode)
    recorded = _as_resolved(paths, config_file.load(str(paths.config_toml)))
    changes = _changes(values, recorded, paths)
    run = build(RunConfig, {**recorded, **changes, "resume": str(paths.root), "dry_run": bool(values.get("dry_run"))})
    run = with_devices(run, here=mode.name == "train")  # a `train` run recorded before its count was
    check_progress(paths, run.step.epochs, mode.started_by)
    for line in take_notes():  # the run's damaged files read around so far: said before it goes on
        error(f"warning: {line}")
    spec = task_spec(run, str(paths.root), run.data.data_dir, mode.spec_name)
    repairs = lead and not run.launch.dry_run  # a dry run renames nothing; another task of the step neither
    if repairs:  # the newest checkpoint whole before anything loads it
        for line in start_point.repair(paths):  # a warning: on stderr, beside the others
            error(line)
    low, high = run.node_range  # a --nodes range: SLURM picks the count when the job starts; each must go on
    processes = [nodes * run.tasks_per_node for nodes in range(low, high + 1)]
    elastic = start_point.check_resume(paths, spec, run.device_counts, processes)
    return Resume(run, mode.name, changes, elastic)


def check_progress(paths: RunPaths, epochs: int, started_by: str) -> None:
    """What the run has done must be kept: a checkpoint to go on from where it trained (else it would start
    again from step 0 over its own metrics), and no fewer --epochs than its checkpoint has done."""
    newest, _ = saved.newest_whole(paths, rename=False, crc=False)
    done = len(read_jsonl(paths.metrics))
    if newest is None and done:
        raise UsageError(
            f"--resume {paths.root}: it trained {counted(done, 'epoch')} (metrics.jsonl) but has no whole checkpoint left "
            f"in {paths.checkpoints.name}/, so it would start again from step 0; start a new run with its settings "
            f"instead: {started_by} --config {paths.config_toml}"
        )
    if newest is not None and epochs < newest.epoch:
        raise UsageError(
            f"--epochs {epochs} is fewer than the {newest.epoch} epochs --resume {paths.root} has done; give "
            f"--epochs {newest.epoch} or more, or leave --epochs out"
        )


def _as_resolved(paths: RunPaths, recorded: dict) -> dict:
    """The run's own values where it said auto and its tasks resolved them (rank_map.json): --platform, which
    the launcher's checks would otherwise guess again here (a run of `srun dali-launch task` on CPU nodes
    was refused for a partition without GPUs, and --platform cpu as another run)."""
    try:
        resolved = read_json(paths.rank_map, kind=list)[0]["resolved"]
    except (LookupError, TypeError):  # none yet, or damaged (noted)
        return recorded
    if recorded.get("platform", "auto") == "auto" and resolved.get("platform") in ("cpu", "gpu"):
        return {**recorded, "platform": resolved["platform"]}
    return recorded


def run_dir_of(run: str, run_root: str) -> RunPaths:
    """RUN as `--resume` takes it: a run directory, else a run's name under --run-root or a SLURM job id, as
    for `status` (registry.find_run)."""
    if Path(run).is_dir() or registry.names_a_path(run):  # a folder: --resume's own words for what it lacks
        paths = RunPaths(Path(run).absolute())
        _check_is_run_dir(paths)
        return paths
    return registry.find_run(run, run_root)


def _check_is_run_dir(paths: RunPaths) -> None:
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


def check_writable(paths: RunPaths) -> None:
    """A run goes on by writing in its directory (checkpoints, logs, its lock): on a read-only file system
    the first write was a 63-line traceback (EROFS), after the resume line."""
    for folder in (paths.root, paths.checkpoints, paths.logs):
        if not folder.is_dir():
            continue
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            raise UsageError(
                f"--resume {paths.root}: {folder} is on a read-only file system, and a run goes on by writing "
                f"there (checkpoints, logs); remount it read-write, then resume again"
            )
        why = folder_problem(folder)
        if why:
            raise UsageError(f"--resume {paths.root}: cannot write in {folder}: {why}; fix that, then resume again")


def refuse_live(paths: RunPaths) -> None:
    """A run directory a job still runs in is refused: its launcher or a task holds its lock, or its SLURM
    job is still queued (locks may not cross NFS hosts). The job handle's state decides, as for `status`."""
    if paths.job.exists() and read_record(paths) is None:  # a SLURM run whose queue cannot be asked
        raise UsageError(
            f"--resume {paths.root}: its job.json is damaged ({parse_json(paths.job)[1] or 'no job id in it'}), so "
            f"whether its SLURM job still runs is unknown; check `squeue --me`, then remove {paths.job} and resume again"
        )
    job = registry.attach(paths)
    job.settle(echo)
    state = job.live_state()
    if state is None:
        return
    holder = lock_holder(paths)
    if holder:
        raise UsageError(
            f"--resume {paths.root}: a job is still running in it (its {holder} holds "
            f"{paths.lock(holder).name}); wait for it to end, or stop it first"
        )
    raise UsageError(
        f"--resume {paths.root}: its SLURM job {job.job_id} is still {job.queue_state() or state}; wait for it "
        f"to end, or `dali-launch cancel {job.job_id}` first"
    )


def _check_entry(values: Values, entry: str, paths: RunPaths, mode) -> None:
    if entry == "train" and mode.name != "train":
        raise UsageError(
            f"--resume {paths.root} was started by `{mode.started_by}`, not `dali-launch train`; "
            f"continue it with `dali-launch --resume {paths.root}`"
        )
    if entry == "task" and mode.spec_name != "slurm":
        raise UsageError(
            f"--resume {paths.root} was started by `{mode.started_by}`, whose tasks are not SLURM's; continue it "
            f"with `dali-launch --resume {paths.root}`"
        )
    if values.get("local") and "local" in values.given and mode.name != "local":
        raise UsageError(
            f"--resume {paths.root} was started by `{mode.started_by}`, not on local processes; "
            f"continue it with `dali-launch --resume {paths.root}` (no --local)"
        )


def _changes(values: Values, recorded: dict, run: RunPaths) -> dict:
    """The given flags that differ from the run's own values: allowed ones, or a UsageError."""
    changes, root, elastic = {}, run.root, None  # whether its checkpoint may resize: asked once, if need be
    rules, paths = marked("on_resume"), marked("path")
    for name in sorted(values.given):
        value, before, rule = values[name], recorded.get(name), rules.get(name)
        # --run-root beside --resume says where RUN's name is; the run keeps its own.
        if (
            value == before
            or name in ("resume", "dry_run", "run_root")
            or (name in paths and _same_path(value, before))
        ):
            continue
        flag = "--" + name.replace("_", "-")
        elastic = start_point.resizable(run) if elastic is None and rule == "elastic" else elastic
        if rule == "elastic" and not elastic:
            raise UsageError(
                f"{flag} {value} differs from the run's own {'default' if before is None else before}, but the "
                f"newest checkpoint of --resume {root} was written by an earlier dali-launch, whose shard-order "
                f"checkpoints hold each process's own readers only; leave {flag} out to continue it"
            )
        if rule not in ("may change", "elastic"):
            raise UsageError(
                f"{flag} {value} differs from the run's own {before} and would make --resume {root} "
                f"another run; leave {flag} out to continue it, or start a new run"
            )
        changes[name] = value
    return changes


def _same_path(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a).resolve() == Path(b).resolve()
