"""What set_up.py builds, part by part, from a task's plan and its inputs: training's pipelines (and the rest of an
epoch begun on another layout), the first device call as they are expected to give it or as they gave it, the
model the plan's options make, the checkpointer, the evaluator, and how a restored state goes on on this job's
devices."""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import jax
import numpy as np

from dali_launch.trainer import compile_cache
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.data import batch_record, dali, expected, records, remainder, shards
from dali_launch.trainer.data.batches import DeviceBatches, Readers, batch_sharding, calls_per_epoch
from dali_launch.trainer.data.expected import Expected
from dali_launch.trainer.data.hosting import ShardLayout
from dali_launch.trainer.data.rows import laid_out
from dali_launch.trainer.plan import Inputs, Plan
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.resilience import start_point
from dali_launch.trainer.resilience.checkpoint import Checkpointer, zero_tally
from dali_launch.trainer.resilience.start_point import StartPoint
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.step import build
from dali_launch.trainer.step.evaluate import Evaluator, split_dir
from dali_launch.trainer.step.initial_state import Made
from dali_launch.trainer.step.sgd import call_tally
from dali_launch.trainer.tasks.contract import Task


@dataclass
class Parts:
    """What the build starts from: the plan's inputs and the plan as it stands (set_up.py sets each later stage's),
    and what follows from them alone: this process's shards and where its pipelines start."""

    inputs: Inputs
    plan: Plan
    sharding: shards.Sharding = field(init=False)
    begin: dali.Start = field(init=False)

    def __post_init__(self):
        f, p = self.facts, self.plan
        self.sharding = shards.Sharding(
            f.first_device, f.local_device_count, f.job_device_count, p.data.readers_per_device
        )
        self.begin = _begin(self.spec, f, p, self.start)

    @property
    def spec(self) -> TaskSpec:
        return self.inputs.spec

    @property
    def facts(self) -> Facts:
        return self.inputs.facts

    @property
    def start(self) -> StartPoint:
        return self.inputs.start

    @property
    def task(self) -> Task:
        """The run's (tasks/contract.py), resolved once (entries.py): its outputs name the batches."""
        return self.inputs.entries.task

    @property
    def training(self) -> dali.Split:
        """Training's split as its pipelines read it: the task's outputs, this plan's samples a device and call."""
        split, outputs = split_dir(self.spec, "training"), self.task.outputs
        return dali.Split(split, True, self.plan.step.call_batch, self.spec.step.seed, outputs)

    def made(self) -> Made:
        """The model the plan's options make (the factory resolved once: entries.py), the task, the rate's scale."""
        model = self.inputs.entries.model(self.plan.step.model_options(self.spec.model))
        return Made(model, self.task, self.plan.step.lr_scale)

    def pipelines(self) -> DeviceBatches:
        """Training's pipelines from the start point, their DALI states where they apply."""
        layout = ShardLayout(self.sharding.global_devices, self.sharding.readers, *self._batch_and_k())
        states = self.start.pipeline_states(self.sharding.shard_ids, layout)
        readers = Readers(list(self.facts.devices), list(self.facts.job_devices), self.sharding)
        return dali.build(self.training, readers, self.plan.data, checkpoints=states, start=self.begin)

    def remainder(self, data) -> DeviceBatches:
        """The rest of the start point's epoch, begun on another layout: that layout's pipelines, from their
        states, hosted on this process's devices (the data plan decided, data/hosting.py says how)."""
        devices, rest = list(self.facts.devices), self.plan.data.remainder
        return remainder.build(self.training, devices, rest, self.plan.data, self.start, data)

    def first_call_ahead(self) -> tuple[build.FirstCall, Expected] | None:
        """The first device call as the pipelines are expected to give it (data/expected.py, else the record of
        their last start), before they are built: the model's side is made on it while they are built. None
        where no guess is made."""
        reader_batch = self.plan.step.call_batch // self.sharding.readers  # dali.build's
        calls = partial(calls_per_epoch, sharding=self.sharding, reader_batch=reader_batch, start=self.begin)
        guess = expected.guess(self.plan.data, split_dir(self.spec, "training"), calls, self.task)
        guess = guess or batch_record.expected(self._recorded(), self.task.outputs, calls, self.facts.room.samples)
        if guess is None:
            return None
        on = batch_sharding(list(self.facts.job_devices))
        row = lambda x: laid_out(np.shape(x), np.asarray(x).dtype, on)
        tally = jax.tree.map(row, call_tally(zero_tally(self.task.metrics), self.task))  # as put() lays them out
        example, batch = guess.example(self.task.model_input), guess.batch(on, self.plan.step.call_batch)
        return build.FirstCall(example, tally, batch, on, self.sharding.readers), guess

    def record_batches(self, data) -> None:
        """Process 0 keeps what training's pipelines gave for their next start, where expected.py foresees none
        (batch_record.py: one's own pipeline, a task's of more than two outputs)."""
        if self.facts.process_index or expected.foresees(self.plan.data.pipeline, self.task):
            return
        name, shared = self._record_key(), compile_cache.shared_folder(self.spec)
        batch_record.write(batch_record.places(self.spec.run_dir, shared, name), name, data.sample, data.num_samples)

    def _recorded(self) -> dict | None:
        """The record of these pipelines' last start (this run's, or the run root's), if one is kept."""
        name, shared = self._record_key(), compile_cache.shared_folder(self.spec)
        return batch_record.read(batch_record.places(self.spec.run_dir, shared, name), name)

    def _record_key(self) -> str:
        return batch_record.key(self.plan.data, split_dir(self.spec, "training"), self.task.outputs)

    def first_call_on(self, data, rest) -> build.FirstCall:
        """The first device call as the pipelines gave it (the rest's, where one is read first)."""
        first = rest or data
        tally = first.put([call_tally(zero_tally(self.task.metrics), self.task)] * len(self.facts.devices))
        rest_batch = self.plan.data.remainder.batch_per_step if rest else None
        example, on = first.first_sample(self.task.model_input), data.sharding_spec
        return build.FirstCall(example, tally, first.peek(), on, self.sharding.readers, rest_batch)

    def checkpointer(self, asynchronous: bool) -> Checkpointer:
        r, timeout_s = self.spec.resilience, self.spec.distributed.barrier_timeout_s
        paths, kind = RunPaths(self.spec.run_dir), self.plan.data.decoded_cache
        return Checkpointer(paths, r.keep_checkpoints, asynchronous, timeout_s, kind, self.spec.how_to_resume())

    def check_data_set(self, data, listing: Future | None) -> Future | None:
        """A checkpoint's place in the data means samples of one data set: the one its fingerprint names (the
        launcher's --resume checked it too; a SLURM requeue comes here alone). A global order's is its feeds'.
        Afresh there is nothing to check: the listing is returned unread, for the first checkpoint to take
        (train.py), so that the first step does not wait for it (60,000 LMDB records: 0.1-0.3 s)."""
        if listing and not self.start.record:
            return listing
        if listing:
            data.fingerprint = listing.result()
        if self.start.record:
            start_point.check_data_set(RunPaths(self.spec.run_dir), self.spec, self.start.record, data.fingerprint)
        return None

    def _batch_and_k(self) -> tuple[int, int]:
        return self.plan.step.batch_per_device_step, self.plan.step.steps_per_call


def _begin(spec: TaskSpec, facts: Facts, plan: Plan, start: StartPoint) -> dali.Start:
    """Where training's pipelines start: the start point's epoch and calls (after the rest of an epoch begun
    on another layout: the next epoch's start)."""
    return dali.Start(
        spec.data.sample_order,
        spec.step.seed,
        facts.job_device_count,
        plan.step.batch_per_device_step,
        plan.step.steps_per_call,
        epoch=start.epoch,
        call=0 if plan.data.remainder else start.calls_done,
        offset=start.offset,
        first_global_batch=start.first_global_batch,
        feed_workers=plan.data.feed_workers,
    )


def listed(spec: TaskSpec, facts: Facts) -> Future | None:
    """Shard order: the training set's fingerprint, listed in a thread on process 0 (whose checkpoints are the
    ones written) while the model initialises and the first call compiles: ImageNet's 1.28 M files take
    seconds. Not beside the pipelines' builds: py-lmdb opens a path once per process at a time."""
    if spec.data.sample_order != "shards" or facts.process_index != 0:
        return None
    return ThreadPoolExecutor(1, "dali-launch-listing").submit(
        start_point.fingerprint_read, spec, Path(split_dir(spec, "training")), records
    )


def evaluator(parts: Parts, runner, shapes, made: Made) -> Evaluator:
    """This process's part of the evaluation of `made`'s model, and the variables' shapes `prepare` compiles it for:
    a sharded state, every process evaluating, is applied as it lies over the job's devices (not gathered)."""
    spec = parts.spec
    laid = runner.restore_shapes(shapes) if spec.eval.eval_on == "all" else None
    evaluated = (laid or shapes).variables(ema=spec.eval.eval_ema)
    return Evaluator(spec, parts.facts, parts.plan, made, evaluated, laid is not None)


def continued(parts: Parts, state, slots_per_epoch: int, reporter):
    """The restored state, continued on this job's devices: an elastic resume says and records
    (elastic.jsonl) how it goes on, and under another global batch counts its steps anew (start_point.py)."""
    start, rest = parts.start, parts.plan.data.remainder
    slot = start.rebased_slot(slots_per_epoch)
    if slot is not None:
        state = state.replace(slot=np.asarray(slot, np.int32))
    if (start.plan and start.plan.changed) or rest:
        said = [start.plan.describe() if start.plan.changed else "", rest.describe(start.epoch) if rest else ""]
        reporter.say("; ".join(part for part in said if part))
        if parts.facts.process_index == 0:
            record = {"checkpoint": start.step, "epoch": start.epoch, "position": start.record["position"]}
            extra = {"remainder": rest.as_dict()} if rest else {}
            with RunPaths(parts.spec.run_dir).elastic.open("a") as out:
                out.write(json.dumps({**record, **start.plan.as_dict(), **extra}) + "\n")
    return state
