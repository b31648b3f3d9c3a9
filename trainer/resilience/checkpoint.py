"""Checkpoints: everything a resumed run needs, written atomically by Orbax, the last K kept.

Saved: one replica of the train state (every replica is identical; under a --mesh that shards it, the
state as it lies, each process writing its own shards), the epoch's running tally
(position in the shard, loss and sample sums, the task's training-metric sums: job-wide sums, so they go on
alike on any device count, mesh or order), the epoch and the device calls done in it, and every
process's DALI reader positions (DALI pipeline checkpointing). Under --sample-order global it also
holds `order`: the epoch's position in the global order and what elastic.py needs to continue on
another device count; the DALI states then hold only random operators' states, used on the same
topology (bit-identical resumes) and dropped on another. Under shard order it holds `shards`: the
layout whose pipelines the epoch reads and the shard of every DALI state, so that any topology can
read the rest of the epoch with those pipelines (data/hosting.py), and the same for elastic.py. The
DALI states are gathered to all
processes and written by the primary one; Orbax marks a step complete only once all of it is on
disk. What a task starts from is read without Orbax (saved.py, start_point.py); Orbax restores the
arrays alone (`restore`).

Asynchronous by default (--checkpoint-async): `save` returns once the state is in host memory
(copied before the next step donates its buffers) and Orbax writes it from a thread, into
`STEP.orbax-checkpoint-tmp` renamed to `STEP` once complete, so a rank killed mid-write leaves the
previous complete checkpoint; the next `save` first waits for the write before it. A checkpoint that
ends a task (a stop signal, the run's end) is waited for: `wait`. `take_wait_s` is the time callers
spent blocked here, what metrics.jsonl reports per epoch (`checkpoint_wait_s`).

Every checkpoint is verifiable on its own: process 0 writes its file record (saved.FILES: each file's
size and CRC) into the temporary folder once every process's writes are in, just before Orbax's commit
marker and rename (`RecordedCommit`), so a checkpoint killed mid-write is no checkpoint and a committed
one always carries the record its damage is found by (a truncated or flipped file: saved.newest_whole).

A write that fails in the background (a full disk) must not hang the job: Orbax's threads meet the
other processes at barriers even on their way out of a failed write (the others then wait for a
barrier this process never reaches, and this process's exit waits for its thread: 900 s). Its
barriers go through `FailFast`, which a thread unwinding from a failure does not enter: the failure
reaches `check` at the loop's next sync point (or the next `save`/`wait`) as one line, the process
ends, and the launcher ends the others.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import serialization
from jax.experimental import multihost_utils

from dali_launch.trainer.data.rows import first_row
from dali_launch.trainer.resilience import disk, saved
from dali_launch.trainer.run_dir import RunPaths

KEPT = ("position", "loss", "count", "metrics")  # what a checkpoint keeps of the tally device calls carry


def zero_tally(metrics: tuple[str, ...] | None) -> dict:
    """What a checkpoint holds of an epoch's tally, at the epoch's start: the readers' position, the loss and
    sample sums, and the sums of the training metrics named `metrics` (None: none, as an earlier version's
    checkpoints hold, which a restore must ask for as they are)."""
    # 0-d arrays rather than numpy scalars: Orbax restores into arrays only
    zero = {"position": np.zeros((), np.int32), "loss": np.zeros((), np.float32), "count": np.zeros((), np.float32)}
    return zero if metrics is None else zero | {"metrics": {name: np.zeros((), np.float32) for name in metrics}}


def order_record(data, epoch: int, calls_done: int) -> dict | None:
    """A global order's record for a checkpoint of `data` (batches.DeviceBatches): where the job is in the
    epoch's order, and with what (start_point.py and elastic.py read it back); None in shard order."""
    layout, begun = data.layout, data.start
    if layout is None:
        return None
    offset = begun.offset if epoch == begun.epoch else 0
    return {
        "position": offset + calls_done * layout.call_samples,
        "global_batch": layout.global_batch,
        "first_global_batch": begun.first_global_batch or layout.global_batch,
        "devices": layout.devices,
        "steps_per_call": layout.steps,
        "dataset": data.fingerprint,
    }


def shard_record(data, calls_done: int) -> dict | None:
    """A shard order's record for a checkpoint of `data` (batches.DeviceBatches, or remainder.RemainderBatches
    while an epoch begun on another layout is read): the layout read and whose each DALI state is, and
    the job's batch as elastic.py reads it (the keys of order_record); None under a global order."""
    if data.layout is not None:
        return None
    begun, reading, processes = data.start, data.reading, jax.process_count()
    job = begun.batch * begun.devices
    return {
        "position": calls_done * reading.call_samples,  # rows of the epoch's calls done, padding included
        "global_batch": job,
        "first_global_batch": begun.first_global_batch or job,
        "devices": begun.devices,
        "steps_per_call": begun.steps,
        "dataset": data.fingerprint,  # process 0's (the one whose record is written); None: a format not known
        "reading": reading.as_dict(),
        "shard_ids": [data.pipeline_shards(p, processes) for p in range(processes)],
        "sample": data.sample,
    }


def _gather(local: list[bytes]) -> list[list[str]]:
    """Every process's DALI states (base64), indexed by process; all processes call this. O(N) bytes per
    rank at every save (one all-gather of ~300 bytes a pipeline), written in one file by process 0."""
    mine = [base64.b64encode(b).decode() for b in local]
    if jax.process_count() == 1:
        return [mine]
    blob = np.frombuffer(json.dumps(mine).encode(), np.uint8)
    size = int(np.max(multihost_utils.process_allgather(np.array([blob.size]))))
    padded = np.zeros(size, np.uint8)
    padded[: blob.size] = blob
    rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(jax.process_count(), size)
    return [json.loads(bytes(row).rstrip(b"\0")) for row in rows]


class FailFast:
    """Orbax's barrier among the checkpoint's processes (its `barrier_sync_fn`), refused by a thread that
    is unwinding from this process's failed write (Orbax syncs in a `finally`): that thread raises the
    failure instead of waiting for processes that wait for another barrier. The first one is kept."""

    CANCELLED = (asyncio.CancelledError, concurrent.futures.CancelledError)

    def __init__(self, processes: set[int]):
        self.barrier = ocp.multihost.get_barrier_sync_fn(processes=processes)
        self.failed: BaseException | None = None
        self.peers = len(processes) > 1  # alone, no barrier waits: nothing to refuse

    def __call__(self, *, key: str, timeout_ms: int) -> None:
        unwinding = sys.exc_info()[1] if self.peers else None
        if unwinding is not None and not isinstance(unwinding, self.CANCELLED):
            self.failed = self.failed or unwinding
            raise unwinding
        self.barrier(key=key, timeout_ms=timeout_ms)


class RecordedCommit(ocp.path.atomicity.AtomicRenameTemporaryPath):
    """Orbax's commit of a step folder (process 0, every process's writes done: marker, then rename),
    with the folder's file record written first, in the same folder: committed means recorded."""

    async def finalize(self):
        if self.get_final().name.isdigit():  # the step's folder; its items (state, meta, ...) commit first
            await asyncio.to_thread(saved.record_files, Path(self.get()))
        await super().finalize()


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint taken, not yet written (Checkpointer.snapshot): its step, state (host arrays, or a sharded
    state's device arrays, which Orbax copies as it writes), first row of the tally, and metadata."""

    step: int
    state: object
    tally: dict
    meta: dict

    @property
    def detached(self) -> bool:
        """Every array on the host: the devices may donate the state's buffers before it is written."""
        return all(isinstance(leaf, np.ndarray) for leaf in jax.tree.leaves(self.state))


class Checkpointer:
    def __init__(
        self,
        paths: RunPaths,
        keep: int,
        asynchronous: bool = True,
        timeout_s: int = 900,
        decoded_cache: str = "off",
        resume: str = "resume the run",
    ):
        """`decoded_cache`: plan/data.py's kind, recorded with the DALI states (their graph depends on it);
        `resume`: the command that continues the run, for the line a refused write ends with."""
        # Naming every process makes Orbax sync through jax.distributed's barrier, not by running a
        # collective on every device (a compile, ~2.7 s at start-up on 2 GPUs; gloo on CPU). Orbax
        # then leaves the folder to us; every process may make it.
        active = set(range(jax.process_count()))
        processes, self.barrier = ocp.options.MultiprocessingOptions(active_processes=active), FailFast(active)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            create=False,
            enable_async_checkpointing=asynchronous,
            multiprocessing_options=processes,
            async_options=ocp.AsyncOptions(timeout_secs=timeout_s, barrier_sync_fn=self.barrier),  # never hangs
            temporary_path_class=RecordedCommit,  # the public atomicity_options name modes, not a class of ours
        )
        paths.checkpoints.mkdir(parents=True, exist_ok=True)
        self.paths, self.resume = paths, resume
        self.manager = ocp.CheckpointManager(paths.checkpoints.absolute(), options=options)
        self.asynchronous, self.waited_s, self.decoded_cache = asynchronous, 0.0, decoded_cache
        self.writing: int | None = None  # the step last saved: a refusal while it may be in flight is its
        self.last_write_s: float | None = None  # the last `write`'s time (train.py weighs hiding the next one)

    def save(self, step: int, state, tally, pipes, position: dict) -> None:
        """All processes call this at the same `step` (a count that grows: device calls, or under a global
        order samples; there, checkpoints in an epoch's trailing padding calls all count its N samples).

        `state` is one replica, or a state sharded over the job's devices (runner.saved); `tally` is per device,
        as the batches; `position` is where in the data the checkpoint stands: its `epoch` and `calls_done`, and
        a global order's `order` or a shard order's `shards` record (order_record, shard_record) where there is
        one. Returns once the checkpoint is in host memory; `wait` for it to be on disk.
        """
        self.write(self.snapshot(step, state, tally, pipes, position))

    def snapshot(self, step: int, state, tally, pipes, position: dict) -> Snapshot:
        """`save`'s first half, which every process calls at the same point (the DALI states are gathered): what
        the checkpoint holds, taken now. Where it is `detached` (every array copied to the host), the devices
        may go on, donating the state's buffers, before `write` puts it on disk."""
        began = time.perf_counter()
        dali = _gather([p.checkpoint() for p in pipes])
        meta = {"epoch": position["epoch"], "calls_done": position["calls_done"], "dali": dali}
        meta |= {
            "decoded_cache": self.decoded_cache,
            **{k: v for k, v in position.items() if k in ("order", "shards") and v},
        }
        if "metrics" in tally:  # the metric sums `tally` holds, by name: what a restore asks for (saved.Saved)
            meta["metrics"] = sorted(tally["metrics"])
        meta[saved.RECORDED] = saved.FILES  # RecordedCommit writes it: a checkpoint found without it lost it
        host_state = jax.tree.map(_host, state)  # a copy: the next step donates the device buffers
        tally = jax.tree.map(np.asarray, first_row(tally))
        self.waited_s += time.perf_counter() - began
        return Snapshot(step, host_state, tally, meta)

    def write(self, snapshot: Snapshot) -> None:
        """`save`'s second half: the snapshot handed to Orbax (written before this returns, or in the background
        where checkpoints are asynchronous); `last_write_s` is how long it held the caller."""
        began = time.perf_counter()
        # Orbax keeps one checkpoint per step number, and the newest must be the last written: strictly increasing.
        latest, step = self.manager.latest_step(), snapshot.step
        step = step if latest is None else max(step, latest + 1)
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(serialization.to_state_dict(snapshot.state)),
            tally=ocp.args.StandardSave(snapshot.tally),
            meta=ocp.args.JsonSave(snapshot.meta),
        )
        # Orbax first waits for the previous write: a refusal there is that checkpoint's.
        self._guarded(self.writing or step, lambda: self.manager.save(step, args=args, force=True))
        self.writing = step
        if not self.asynchronous:
            self._guarded(step, self.manager.wait_until_finished)
            self.writing = None
        self.last_write_s = time.perf_counter() - began
        self.waited_s += self.last_write_s

    def wait(self) -> None:
        """Until every checkpoint saved is complete on disk (at most the async timeout)."""
        began = time.perf_counter()
        self._guarded(self.writing or 0, self.manager.wait_until_finished)
        self.writing = None
        self.waited_s += time.perf_counter() - began

    def check(self) -> None:
        """At a sync point: a write that failed in the background ends the task now, in one line."""
        if self.barrier.failed is not None:
            failed, self.barrier.failed = self.barrier.failed, None
            self._guarded(self.writing or 0, lambda: _raise(failed))

    def take_wait_s(self) -> float:
        """Seconds spent blocked in `save` and `wait` since the last call."""
        waited, self.waited_s = self.waited_s, 0.0
        return waited

    def _guarded(self, step: int, write) -> None:
        """`write()`; a disk that refuses it (full, read-only, over quota) ends in one line (disk.py)."""
        try:
            write()
        except Exception as e:
            why = disk.refusal(e)
            if why is None:
                raise
            raise disk.checkpoint_refused(self.paths, step, why, self.resume) from None

    def restore(self, step: int | None, template_state, template_tally: dict) -> tuple:
        """The train state and the epoch's tally of checkpoint `step`, restored into the templates' structure
        and kind (host arrays: every array whole; abstract arrays with shardings: each process reads its own
        shards, Runner.sharded_shapes); the templates themselves for a fresh start (`step` None)."""
        if step is None:
            return template_state, template_tally
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(serialization.to_state_dict(template_state)),
            tally=ocp.args.StandardRestore(template_tally),
        )
        restored = self.manager.restore(step, args=args)
        return serialization.from_state_dict(template_state, restored.state), dict(restored.tally)


def _host(x):
    """A leaf as Orbax is given it: on the host where this process holds it whole (process 0 writes it), else
    the array spread over processes, whose shards each process writes (Orbax copies them to the host
    before `save` returns). Either restores anywhere, into the host arrays `restore` asks for."""
    return x if isinstance(x, jax.Array) and not x.is_fully_addressable else np.asarray(x)


def _raise(error: BaseException):
    raise error
