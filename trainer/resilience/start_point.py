"""Where a task starts: afresh, or at the newest complete checkpoint of its run directory, on this layout.

Read without JAX or Orbax (saved.py reads the files), so the two sides agree by construction:
- `check_resume` is what the launcher's `--resume` calls before it writes or submits anything: every rule
  about continuing the checkpoint on the layout the resumed job may start with, applied once, here;
- `read` is what each task calls, once, before anything is resolved or built: its `StartPoint`.
Either order continues on another device count under elastic.py's batch rules, on the data set the
checkpoint was written for. Shard order (--sample-order shards): the DALI readers restore their own
positions, so the checkpoint holds every pipeline's state by shard id: on the layout that wrote it the
pipelines go on (whatever the processes); on another, the rest of the epoch is read with those
pipelines hosted on the new devices (data/hosting.py), and the next epoch with the new layout's own.
A shard-order checkpoint of an earlier version (no record) continues only on its own processes.
Global order: the checkpoint holds a position in the epoch's order; the pipelines keep their random
operators' states only on the same layout.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.data.hosting import Remainder, ShardLayout
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import elastic, saved
from dali_launch.trainer.run_dir import RunPaths


@dataclass(frozen=True)
class StartPoint:
    """Where this task starts training: `calls_done` device calls (of this job's size) into `epoch`.

    A fresh start is one like any other: epoch 0, no calls done, no checkpoint (`step` None).
    """

    step: int | None = None  # the checkpoint's step; None: a fresh start
    epoch: int = 0
    calls_done: int = 0
    dali: tuple[bytes, ...] | None = None  # this process's pipelines' states (device, then reader); None: afresh
    order: dict | None = None  # --sample-order global: the checkpoint's record (checkpoint.order_record)
    plan: elastic.Plan | None = None  # how the checkpoint continues on this job's devices (either order)
    offset: int = 0  # global order: positions of the first call's epoch done before its calls (another batch)
    shards: dict | None = None  # shard order: the checkpoint's record (checkpoint.shard_record)
    states: dict[int, bytes] | None = None  # shard order: every pipeline's DALI state, by shard id
    decoded_cache: str | None = None  # the kind the DALI states were written with (plan/data.py keeps it); None: afresh
    metrics: tuple[str, ...] | None = None  # the training-metric sums the checkpoint's tally holds (saved.Saved)

    @classmethod
    def fresh(cls) -> StartPoint:
        return cls()

    @property
    def record(self) -> dict | None:
        return self.order or self.shards

    @property
    def first_global_batch(self) -> int:
        """The run's first segment's global batch (elastic.py's rescale rule); 0: this segment is the first."""
        record = self.record
        return record.get("first_global_batch", record["global_batch"]) if record else 0

    def pipeline_states(self, shard_ids: tuple[int, ...], layout: ShardLayout) -> list[bytes] | None:
        """The DALI states to build this process's pipelines (reading `shard_ids` of `layout`) from, or None
        to build them afresh.

        Shard order: on the layout the checkpoint's epoch reads, each shard's pipeline goes on from its
        state; on another, they start afresh at the next epoch (the rest of this one: `remainder`). An
        earlier version's checkpoint holds this process's own readers only: another count is refused.
        Global order: the feeds start at the order's position; the states then only hold random
        operators', kept on the same layout and dropped on another (an elastic resume)."""
        if self.shards:
            return [self.states[s] for s in shard_ids] if self._reading() == layout else None
        if self.dali is None or len(self.dali) == len(shard_ids):
            return None if self.dali is None else list(self.dali)
        if self.order:
            return None
        raise UsageError(
            f"the checkpoint holds {len(self.dali)} DALI readers for this process but it has "
            f"{len(shard_ids)}; resume with the run's own --nodes/--gpus-per-node/"
            f"--tasks-per-node/--readers-per-device"
        )

    def remainder(self, layout: ShardLayout, rule: str) -> Remainder | None:
        """Shard order, stopped mid-epoch on another layout than `layout` (this job's): how the rest of
        that epoch is read here. None when the epoch goes on as it was, or starts afresh."""
        reading = self._reading()
        if reading is None or reading == layout or self.calls_done == 0:
            return None
        return Remainder(reading, layout.devices, rule, self.calls_done)

    def _reading(self) -> ShardLayout | None:
        return ShardLayout.from_dict(self.shards["reading"]) if self.shards else None

    def rebased_slot(self, slots_per_epoch: int) -> int | None:
        """The optimizer's step count (slots) to continue from under another global batch, or None to keep
        the checkpoint's: re-based on the new epoch length, so the schedule goes on where it was."""
        record = self.record
        if not self.plan or not self.plan.changed or self.plan.global_batch == record["global_batch"]:
            return None
        return self.epoch * slots_per_epoch + math.ceil(record["position"] / self.plan.global_batch)


def repair(paths: RunPaths) -> list[str]:
    """Process 0, before any process reads its start point: damaged checkpoints newer than the newest whole
    one renamed out of the way (saved.newest_whole); a line for each."""
    newest, damaged = saved.newest_whole(paths, rename=True)
    return [d.line(newest) for d in damaged]


def read(paths: RunPaths, spec: TaskSpec, process_id: int, processes: int, devices: int) -> StartPoint:
    """This task's start point: the newest whole checkpoint (after `repair`: sizes checked), continued on
    `processes` processes and `devices` devices of the job, or a fresh start. Raises the UsageError of a
    layout it cannot go on on."""
    newest, _ = saved.newest_whole(paths, rename=False, crc=False)
    if newest is None:
        return StartPoint.fresh()
    if newest.record is None:  # an earlier version's shard order
        _check_processes(newest, processes)
        states = _states(newest, process_id)
        kept = {"decoded_cache": newest.decoded_cache, "metrics": newest.metrics}
        return StartPoint(newest.step, newest.epoch, newest.calls_done, states, **kept)
    plan = elastic.plan(newest.record, devices, spec.step.elastic_batch, spec.optimizer.accumulate_steps)
    if newest.shards:  # the states restore on its layout, or read the rest of its epoch (remainder.py)
        states = {shard: base64.b64decode(state) for shard, state in newest.states_by_shard().items()}
        fields = {"plan": plan, "shards": newest.shards, "states": states, "decoded_cache": newest.decoded_cache}
        fields["metrics"] = newest.metrics
        return StartPoint(newest.step, newest.epoch, newest.calls_done, **fields)
    # The position is in samples: the calls of this job's size before it are done, and what is left of
    # one (another global batch) is the offset the feeds start from.
    calls, offset = divmod(newest.order["position"], plan.global_batch * plan.steps_per_call)
    states = _states(newest, process_id) if newest.processes == processes else None
    kept = {"decoded_cache": newest.decoded_cache if states else None, "metrics": newest.metrics}
    return StartPoint(newest.step, newest.epoch, calls, states, newest.order, plan, offset, **kept)


def check_resume(paths: RunPaths, spec: TaskSpec, device_counts: list[int], processes: list[int]) -> str:
    """What `--resume` asks before anything is written or submitted: can the newest complete checkpoint go
    on with `spec` on every device count and process count the job may start with? A UsageError if not;
    else how a global order continues (elastic.Plan.describe; '' when nothing changes, when SLURM picks
    the count, or without a checkpoint). Damaged checkpoints are passed over (the launcher renamed them)."""
    newest, _ = saved.newest_whole(paths, rename=False, crc=False)
    if newest is None:
        return ""
    if newest.record is None:
        for count in processes:
            _check_processes(newest, count)
        return ""
    rule, accumulate = spec.step.elastic_batch, spec.optimizer.accumulate_steps
    plans = [elastic.plan(newest.record, d, rule, accumulate) for d in device_counts]
    from dali_launch.trainer.data import records  # numpy and the formats' readers: only where they are needed

    now = fingerprint_read(spec, Path(spec.data.data_dir) / "training", records)
    if now is not None:
        check_data_set(paths, spec, newest.record, now)
    return plans[0].describe() if len(plans) == 1 else ""


def resizable(paths: RunPaths) -> bool:
    """Whether the run may --resume on another topology: its newest checkpoint has a record (either
    order, this version), or it has none yet (the run then starts afresh on the new one)."""
    newest, _ = saved.newest_whole(paths, rename=False, crc=False)
    return newest is None or newest.record is not None


def fingerprint_read(spec: TaskSpec, split: Path, records) -> dict | None:
    """The fingerprint of what the run's readers read of `split`: under --bad-samples skip, without the
    samples they leave out (the readers' positions and the order numbered those alone), else the folder's.
    The launcher's --resume and set_up.py's shard-order listing take the same one."""
    from dali_launch.trainer.data import bad_samples, formats
    from dali_launch.trainer.data.global_order import fingerprint

    found = formats.reader_of(spec.data.pipeline, split) if spec.data.bad_samples == "skip" else None
    if found is None:
        return records.fingerprint_of(split)
    kwargs, _ = bad_samples.screen(*found, "skip", spec.data.max_bad_samples)
    return fingerprint(records.open_source(found[0], kwargs).keys())


def check_data_set(paths: RunPaths, spec: TaskSpec, record: dict, now: dict | None) -> None:
    """A checkpoint's place in the data means samples of one data set (the readers' positions, or a global
    order's): refuse to continue on another (`now`: the fingerprint of what --data-dir holds,
    global_order.fingerprint; None, or a record without one: a format whose keys are not known here)."""
    was = record.get("dataset")
    if now is not None and was is not None and now != was:
        raise UsageError(
            f"--resume {paths.root}: its checkpoint was written for a training set of {was['samples']} "
            f"samples (keys {was['keys_sha256'][:12]}), but {spec.data.data_dir} now holds {now['samples']} "
            f"(keys {now['keys_sha256'][:12]}); restore the run's data there, or start a new run"
        )


def _check_processes(newest: saved.Saved, processes: int) -> None:
    """Shard order: each process's readers restore their own positions, so only as many processes go on."""
    if newest.processes != processes:
        raise UsageError(
            f"checkpoint step {newest.step} was written by {newest.processes} processes, this job has "
            f"{processes}; resume with the run's own --nodes and --tasks-per-node"
        )


def _states(newest: saved.Saved, process_id: int) -> tuple[bytes, ...]:
    return tuple(base64.b64decode(state) for state in newest.dali[process_id])
