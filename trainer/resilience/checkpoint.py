"""Checkpoints: everything a resumed run needs, written atomically by Orbax, the last K kept.

Saved: one replica of the train state (every replica is identical), the epoch's running tally
(position in the shard, loss and sample sums), the epoch and the device calls done in it, and every
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
"""

from __future__ import annotations

import base64
import json

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import serialization
from jax.experimental import multihost_utils

from dali_launch.trainer.data.dali import first_row
from dali_launch.trainer.resilience import disk, saved
from dali_launch.trainer.run_dir import RunPaths


def zero_tally() -> dict:
    """What a checkpoint holds of an epoch's tally, at the epoch's start."""
    # 0-d arrays rather than numpy scalars: Orbax restores into arrays only
    return {"position": np.zeros((), np.int32), "loss": np.zeros((), np.float32), "count": np.zeros((), np.float32)}


def order_record(data, epoch: int, calls_done: int) -> dict | None:
    """A global order's record for a checkpoint of `data` (dali.DeviceBatches): where the job is in the
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
    """A shard order's record for a checkpoint of `data` (dali.DeviceBatches, or remainder.RemainderBatches
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


class Checkpointer:
    def __init__(self, paths: RunPaths, keep: int, resume: str = "resume the run"):
        """`resume`: the command that continues the run, for the line a refused write ends with."""
        # Naming every process makes Orbax sync through jax.distributed's barrier, not by running a
        # collective on every device (a compile, ~2.7 s at start-up on 2 GPUs; gloo on CPU). Orbax
        # then leaves the folder to us; every process may make it.
        processes = ocp.options.MultiprocessingOptions(active_processes=set(range(jax.process_count())))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=False, enable_async_checkpointing=False, multiprocessing_options=processes
        )
        paths.checkpoints.mkdir(parents=True, exist_ok=True)
        self.paths, self.resume = paths, resume
        self.manager = ocp.CheckpointManager(paths.checkpoints.absolute(), options=options)

    def save(
        self, step: int, epoch: int, calls_done: int, state, tally, pipes, order: dict | None = None, shards=None
    ) -> None:
        """All processes call this at the same `step` (a count that grows: device calls, or under a global
        order samples; there, checkpoints in an epoch's trailing padding calls all count its N samples).

        `state` is one replica (as --parallel lays it out); `tally` is per device, as the batches.
        """
        # Orbax keeps one checkpoint per step number, and the newest must be the last written: strictly increasing.
        latest = self.manager.latest_step()
        step = step if latest is None else max(step, latest + 1)
        meta = {"epoch": epoch, "calls_done": calls_done, "dali": _gather([p.checkpoint() for p in pipes])}
        if order:
            meta["order"] = order
        if shards:
            meta["shards"] = shards
        host_state = jax.tree.map(np.asarray, state)
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(serialization.to_state_dict(host_state)),
            tally=ocp.args.StandardSave(jax.tree.map(np.asarray, first_row(tally))),
            meta=ocp.args.JsonSave(meta),
        )
        try:
            self.manager.save(step, args=args, force=True)
            self.manager.wait_until_finished()
        except Exception as e:
            why = disk.refusal(e)
            if why is None:
                raise
            raise disk.checkpoint_refused(self.paths, step, why, self.resume) from None
        if jax.process_index() == 0:  # every process's part is committed: its files' sizes and CRCs (saved.py)
            saved.record_files(self.paths.checkpoints / str(step))

    def restore(self, step: int | None, template_state, template_tally: dict) -> tuple:
        """The train state (one replica, on the host) and the epoch's tally of checkpoint `step`, restored
        into the templates' structure; the templates themselves for a fresh start (`step` None)."""
        if step is None:
            return template_state, template_tally
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(serialization.to_state_dict(template_state)),
            tally=ocp.args.StandardRestore(template_tally),
        )
        restored = self.manager.restore(step, args=args)
        return serialization.from_state_dict(template_state, restored.state), dict(restored.tally)
