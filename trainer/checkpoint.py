"""Checkpoints: everything a resumed run needs, written atomically by Orbax, the last K kept.

Saved: one replica of the train state (every replica is identical), the epoch's running tally
(position in the shard, loss and sample sums), the epoch and the device calls done in it, and every
process's DALI reader positions (DALI pipeline checkpointing). The DALI states are gathered to all
processes and written by the primary one; Orbax marks a step complete only once all of it is on
disk, and `latest` only ever sees complete steps.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import serialization
from jax.experimental import multihost_utils

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths


@dataclass
class Resume:
    """Where a run picks up: `calls_done` device calls into `epoch`."""
    epoch: int
    calls_done: int
    state: object  # host TrainState, one replica
    tally: dict
    dali: list[bytes]  # this process's pipelines, in local order (device, then reader)


def one_replica(tree):
    """The first local device's row of a pytree laid out one row per device, as host numpy."""
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)[0]), tree)


def _gather(local: list[bytes]) -> list[list[str]]:
    """Every process's DALI states (base64), indexed by process; all processes call this."""
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
    def __init__(self, paths: RunPaths, keep: int):
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        self.manager = ocp.CheckpointManager(paths.checkpoints.absolute(), options=options)

    def save(self, step: int, epoch: int, calls_done: int, state, tally, pipes) -> None:
        """All processes call this at the same `step` (global count of device calls).

        `state` is one replica (as --parallel lays it out); `tally` is per device, as the batches.
        """
        meta = {"epoch": epoch, "calls_done": calls_done, "dali": _gather([p.checkpoint() for p in pipes])}
        host_state = jax.tree.map(np.asarray, state)
        args = ocp.args.Composite(state=ocp.args.StandardSave(serialization.to_state_dict(host_state)),
                                  tally=ocp.args.StandardSave(one_replica(tally)), meta=ocp.args.JsonSave(meta))
        self.manager.save(step, args=args, force=True)
        self.manager.wait_until_finished()

    def latest(self, template_state, template_tally) -> tuple[int, Resume] | None:
        """The newest complete checkpoint, restored into the templates' structure, or None."""
        step = self.manager.latest_step()
        if step is None:
            return None
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(serialization.to_state_dict(template_state)),
            tally=ocp.args.StandardRestore(template_tally), meta=ocp.args.JsonRestore())
        restored = self.manager.restore(step, args=args)
        meta = restored.meta
        state = serialization.from_state_dict(template_state, restored.state)
        if len(meta["dali"]) != jax.process_count():
            raise UsageError(f"checkpoint step {step} was written by {len(meta['dali'])} processes, this job has "
                             f"{jax.process_count()}; resume with the run's own --nodes and --tasks-per-node")
        dali = [base64.b64decode(s) for s in meta["dali"][jax.process_index()]]
        return step, Resume(meta["epoch"], meta["calls_done"], state, dict(restored.tally), dali)
