"""What set_up.py builds, part by part, from a task's plan and facts: training's pipelines (and the rest of an
epoch begun on another layout), the model's side made on the batch they are expected to give or on their
first, the checkpointer, the evaluator, and how a restored state goes on on this job's devices."""

from __future__ import annotations

import dataclasses
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
from dali_launch.trainer.data.hosting import ShardLayout
from dali_launch.trainer.data.rows import laid_out
from dali_launch.trainer.plan import Plan
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.resilience import start_point
from dali_launch.trainer.resilience.checkpoint import Checkpointer, zero_tally
from dali_launch.trainer.resilience.start_point import StartPoint
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.step import build
from dali_launch.trainer.step.evaluate import Evaluator, split_dir
from dali_launch.trainer.step.sgd import call_tally
from dali_launch.trainer.tasks.contract import Task
from dali_launch.trainer.tasks.registry import run_task


@dataclass
class Parts:
    """The build's inputs, and what follows from them alone: this process's shards and where its pipelines start."""

    spec: TaskSpec  # as the model and optimizer are built from it (plan.step.applied)
    facts: Facts
    plan: Plan
    start: StartPoint
    sharding: shards.Sharding = field(init=False)
    begin: dali.Start = field(init=False)
    task: Task = field(init=False)  # the run's (tasks/contract.py): its outputs name the batches

    def __post_init__(self):
        f, p = self.facts, self.plan
        self.task = run_task(self.spec)
        self.sharding = shards.Sharding(
            f.first_device, f.local_device_count, f.job_device_count, p.data.readers_per_device
        )
        self.begin = _begin(self.spec, f, p, self.start)

    @property
    def data_config(self):
        return self.plan.data.config(self.spec.data)

    @property
    def training(self) -> dali.Split:
        """Training's split as its pipelines read it: the task's outputs, this plan's samples a device and call."""
        split, outputs = split_dir(self.spec, "training"), self.task.outputs
        return dali.Split(split, True, self.plan.step.call_batch, self.spec.step.seed, outputs)

    def pipelines(self) -> DeviceBatches:
        """Training's pipelines from the start point, their DALI states where they apply."""
        layout = ShardLayout(self.sharding.global_devices, self.sharding.readers, *self._batch_and_k())
        states = self.start.pipeline_states(self.sharding.shard_ids, layout)
        readers = Readers(list(self.facts.devices), list(self.facts.job_devices), self.sharding)
        return dali.build(self.training, readers, self.data_config, checkpoints=states, start=self.begin)

    def remainder(self, data) -> DeviceBatches:
        """The rest of the start point's epoch, begun on another layout: that layout's pipelines, from their
        states, hosted on this process's devices (the data plan decided, data/hosting.py says how)."""
        devices, rest = list(self.facts.devices), self.plan.data.remainder
        return remainder.build(self.training, devices, rest, self.data_config, self.start, data)

    def model_ahead(self) -> build.Model | None:
        """The model's side made before the pipelines are built, on the batch they are expected to give
        (data/expected.py): the first call compiles while they are built. None where no guess is made."""
        reader_batch = self.plan.step.call_batch // self.sharding.readers  # dali.build's
        calls = partial(calls_per_epoch, sharding=self.sharding, reader_batch=reader_batch, start=self.begin)
        guess = expected.guess(self.data_config, split_dir(self.spec, "training"), calls, self.task)
        guess = guess or batch_record.expected(self._recorded(), self.task.outputs, calls, self.facts.room.samples)
        if guess is None:
            return None
        on, slots = batch_sharding(list(self.facts.job_devices)), guess.steps * self.plan.step.steps_per_call
        row = lambda x: laid_out(np.shape(x), np.asarray(x).dtype, on)
        tally = jax.tree.map(row, call_tally(zero_tally(self.task.metrics), self.task))  # as put() lays them out
        example, batch = guess.example(self.task.model_input), guess.batch(on, self.plan.step.call_batch)
        first = build.FirstCall(example, tally, batch, on, self.sharding.readers)
        try:
            made = build.make(self.spec, self.facts, self.plan.step, first, slots)
        except Exception:  # made again on the pipelines' batch: a true failure is met there, in the same words
            return None
        if self.start.step is None:  # a fresh state is made (a checkpoint's replaces it): its init begins now
            made.initial.start()
        return dataclasses.replace(made, expected=guess)

    def record_batches(self, data) -> None:
        """Process 0 keeps what training's pipelines gave for their next start, where expected.py foresees none
        (batch_record.py: one's own pipeline, a task's of more than two outputs)."""
        if self.facts.process_index or expected.foresees(self.data_config, self.task):
            return
        name, shared = self._record_key(), compile_cache.shared_folder(self.spec)
        batch_record.write(batch_record.places(self.spec.run_dir, shared, name), name, data.sample, data.num_samples)

    def _recorded(self) -> dict | None:
        """The record of these pipelines' last start (this run's, or the run root's), if one is kept."""
        name, shared = self._record_key(), compile_cache.shared_folder(self.spec)
        return batch_record.read(batch_record.places(self.spec.run_dir, shared, name), name)

    def _record_key(self) -> str:
        return batch_record.key(self.data_config, split_dir(self.spec, "training"), self.task.outputs)

    def model_on(self, data, rest, slots: int) -> build.Model:
        """The model's side made on the pipelines' first batch (the rest's, where one is read first)."""
        first = rest or data
        tally = first.put([call_tally(zero_tally(self.task.metrics), self.task)] * len(self.facts.devices))
        rest_batch = self.plan.data.remainder.batch_per_step if rest else None
        example, on = first.first_sample(self.task.model_input), data.sharding_spec
        call = build.FirstCall(example, tally, first.peek(), on, self.sharding.readers, rest_batch)
        return build.make(self.spec, self.facts, self.plan.step, call, slots)

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


def evaluator(parts: Parts, runner, shapes) -> Evaluator:
    """This process's part of the evaluation, and the variables' shapes `prepare` compiles it for: a sharded
    state, every process evaluating, is applied as it lies over the job's devices (not gathered)."""
    spec, facts = parts.spec, parts.facts
    laid = runner.restore_shapes(shapes) if spec.eval.eval_on == "all" else None
    evaluated = (laid or shapes).variables(ema=spec.eval.eval_ema)
    job = list(facts.job_devices) if laid is not None else None
    return Evaluator(spec, list(facts.devices), parts.plan.eval, parts.data_config, evaluated, job)


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
