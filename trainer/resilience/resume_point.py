"""Where a run's training pipelines start, and what a global order's checkpoint says about it.

Shard order: the DALI readers restore their own positions; the epoch and its device calls done are
all the trainer needs. Global order (--sample-order global): the checkpoint records the position in
the epoch's order, the batch arithmetic it ran with and the data set's fingerprint (`order_record`);
a resumed run starts its feeds there, refuses another data set, and on another device count says
and records how it goes on (elastic.py's plan, in RUN/elastic.jsonl).
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import numpy as np

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.data import dali
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience.checkpoint import Resume
from dali_launch.trainer.resilience.elastic import Plan
from dali_launch.trainer.resolve import Resolved
from dali_launch.trainer.run_dir import RunPaths


def start(spec: TaskSpec, auto: Resolved, devices: int, resume: Resume | None) -> dali.Start:
    """Where training's pipelines start. A global order's checkpoint holds a position in the epoch's
    order: the calls of this job's size before it are done (`calls_done` is set to them)."""
    fresh = dali.Start(
        spec.data.sample_order,
        spec.train.seed,
        devices,
        auto.batch_per_device_step,
        auto.steps_per_call,
        feed_workers=auto.feed_workers,
    )
    if not resume:
        return fresh
    if not resume.order:
        return dataclasses.replace(fresh, epoch=resume.epoch, call=resume.calls_done)
    call, offset = divmod(resume.order["position"], auto.call_batch * devices)
    resume.calls_done = call
    first = resume.order.get("first_global_batch", resume.order["global_batch"])
    return dataclasses.replace(fresh, epoch=resume.epoch, call=call, offset=offset, first_global_batch=first)


def check_data_set(fingerprint: dict, order: dict) -> None:
    """A global order's positions mean samples of one data set: refuse to continue on another."""
    if fingerprint != order["dataset"]:
        raise UsageError(
            f"the checkpoint was written for a training set of {order['dataset']['samples']} samples "
            f"(keys {order['dataset']['keys_sha256'][:12]}), but --data-dir now holds {fingerprint['samples']} "
            f"(keys {fingerprint['keys_sha256'][:12]}); point --data-dir at the run's own data, or start a new run"
        )


def elastic(spec: TaskSpec, reporter, resume: Resume, plan: dict, slots: int) -> None:
    """Says and records (elastic.jsonl) how the run continues on this device count. With another global
    batch the step count is re-based on the new epoch length, so the schedule goes on where it was."""
    position = resume.order["position"]
    if plan["global_batch"] != resume.order["global_batch"]:
        slot = resume.epoch * slots + math.ceil(position / plan["global_batch"])
        resume.state = resume.state.replace(slot=np.asarray(slot, np.int32))
    reporter.say(Plan(**plan).describe())
    if jax.process_index() == 0:
        record = {"checkpoint": resume.step, "epoch": resume.epoch, "position": position, **plan}
        with RunPaths(spec.run_dir).elastic.open("a") as out:
            out.write(json.dumps(record) + "\n")


def order_record(data: dali.DeviceBatches, epoch: int, calls_done: int) -> dict | None:
    """A global order's record for a checkpoint: where the job is in the epoch's order, and with what
    (elastic.py reads it back); None in shard order."""
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
