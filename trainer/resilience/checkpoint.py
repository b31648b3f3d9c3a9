"""Checkpoints: everything a resumed run needs, written atomically by Orbax, the last K kept.

Saved: one replica of the train state (every replica is identical), the epoch's running tally
(position in the shard, loss and sample sums), the epoch and the device calls done in it, and every
process's DALI reader positions (DALI pipeline checkpointing). Under --sample-order global it also
holds `order`: the epoch's position in the global order and what elastic.py needs to continue on
another device count; the DALI states then hold only random operators' states, used on the same
topology (bit-identical resumes) and dropped on another. The DALI states are gathered to all
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

from dali_launch.trainer.data.dali import first_row
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths


@dataclass
class Resume:
    """Where a run picks up: `calls_done` device calls into `epoch`.

    Read in two steps: `latest` reads the small part (what the DALI pipelines need to be rebuilt
    where they were); `restore` the arrays, once a template state exists (the model is initialised
    on the pipelines' first batch).
    """

    step: int
    epoch: int
    calls_done: int
    dali: list[bytes] | None  # this process's pipelines, in local order (device, then reader); None: another topology
    order: dict | None = None  # --sample-order global: position, global batch, ... (Checkpointer.save)
    state: object = None  # host TrainState, one replica
    tally: dict | None = None


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
        # Naming every process makes Orbax sync through jax.distributed's barrier, not by running a
        # collective on every device (a compile, ~2.7 s at start-up on 2 GPUs; gloo on CPU). Orbax
        # then leaves the folder to us; every process may make it.
        processes = ocp.options.MultiprocessingOptions(active_processes=set(range(jax.process_count())))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=False, enable_async_checkpointing=False, multiprocessing_options=processes
        )
        paths.checkpoints.mkdir(parents=True, exist_ok=True)
        self.manager = ocp.CheckpointManager(paths.checkpoints.absolute(), options=options)

    def save(self, step: int, epoch: int, calls_done: int, state, tally, pipes, order: dict | None = None) -> None:
        """All processes call this at the same `step` (a count that grows: device calls, or under a global
        order samples; there, checkpoints in an epoch's trailing padding calls all count its N samples).

        `state` is one replica (as --parallel lays it out); `tally` is per device, as the batches.
        """
        # Orbax keeps one checkpoint per step number, and `latest` must be the newest: strictly increasing.
        latest = self.manager.latest_step()
        step = step if latest is None else max(step, latest + 1)
        meta = {"epoch": epoch, "calls_done": calls_done, "dali": _gather([p.checkpoint() for p in pipes])}
        if order:
            meta["order"] = order
        host_state = jax.tree.map(np.asarray, state)
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(serialization.to_state_dict(host_state)),
            tally=ocp.args.StandardSave(jax.tree.map(np.asarray, first_row(tally))),
            meta=ocp.args.JsonSave(meta),
        )
        self.manager.save(step, args=args, force=True)
        self.manager.wait_until_finished()

    def latest(self) -> Resume | None:
        """The newest complete checkpoint, without its arrays (see `restore`), or None."""
        step = self.manager.latest_step()
        if step is None:
            return None
        meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
        order = meta.get("order")
        if order and len(meta["dali"]) != jax.process_count():  # elastic: pipelines start afresh
            return Resume(step, meta["epoch"], meta["calls_done"], None, order)
        if len(meta["dali"]) != jax.process_count():
            raise UsageError(
                f"checkpoint step {step} was written by {len(meta['dali'])} processes, this job has "
                f"{jax.process_count()}; resume with the run's own --nodes and --tasks-per-node"
            )
        dali = [base64.b64decode(s) for s in meta["dali"][jax.process_index()]]
        return Resume(step, meta["epoch"], meta["calls_done"], dali, order)

    def restore(self, resume: Resume, template_state, template_tally) -> None:
        """Fills `resume`'s state and tally, restored into the templates' structure."""
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(serialization.to_state_dict(template_state)),
            tally=ocp.args.StandardRestore(template_tally),
        )
        restored = self.manager.restore(resume.step, args=args)
        resume.state = serialization.from_state_dict(template_state, restored.state)
        resume.tally = dict(restored.tally)
