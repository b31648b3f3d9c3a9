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

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.data import dali, expected, records, remainder, shards
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


@dataclass
class Parts:
    """The build's inputs, and what follows from them alone: this process's shards and where its pipelines start."""

    spec: TaskSpec  # as the model and optimizer are built from it (plan.step.applied)
    facts: Facts
    plan: Plan
    start: StartPoint
    sharding: shards.Sharding = field(init=False)
    begin: dali.Start = field(init=False)

    def __post_init__(self):
        f, p = self.facts, self.plan
        self.sharding = shards.Sharding(
            f.first_device, f.local_device_count, f.job_device_count, p.data.readers_per_device
        )
        self.begin = _begin(self.spec, f, p, self.start)

    @property
    def data_config(self):
        return self.plan.data.config(self.spec.data)

    def pipelines(self) -> dali.DeviceBatches:
        """Training's pipelines from the start point, their DALI states where they apply."""
        layout = ShardLayout(self.sharding.global_devices, self.sharding.readers, *self._batch_and_k())
        states = self.start.pipeline_states(self.sharding.shard_ids, layout)
        split, f = split_dir(self.spec, "training"), self.facts
        return dali.build(
            split, list(f.devices), list(f.job_devices), self.sharding, self.plan.step.call_batch, True,
            self.data_config, self.spec.step.seed, checkpoints=states, start=self.begin,
        )  # fmt: skip

    def remainder(self, data) -> dali.DeviceBatches:
        """The rest of the start point's epoch, begun on another layout: that layout's pipelines, from their
        states, hosted on this process's devices (the data plan decided, data/hosting.py says how)."""
        split, start = split_dir(self.spec, "training"), self.start
        rest, seed = self.plan.data.remainder, self.spec.step.seed
        devices, sample = list(self.facts.devices), start.shards["sample"]
        return remainder.build(split, devices, rest, self.data_config, seed, start.states, data, sample)

    def model_ahead(self) -> build.Model | None:
        """The model's side made before the pipelines are built, on the batch they are expected to give
        (data/expected.py): the first call compiles while they are built. None where no guess is made."""
        reader_batch = self.plan.step.call_batch // self.sharding.readers  # dali.build's
        calls = partial(dali.calls_per_epoch, sharding=self.sharding, reader_batch=reader_batch, start=self.begin)
        guess = expected.guess(self.data_config, split_dir(self.spec, "training"), calls)
        if guess is None:
            return None
        on, slots = dali.batch_sharding(list(self.facts.job_devices)), guess.steps * self.plan.step.steps_per_call
        row = lambda x: laid_out(np.shape(x), np.asarray(x).dtype, on)
        tally = jax.tree.map(row, call_tally(zero_tally()))  # as put() lays them out
        first = build.FirstCall(
            guess.example(), tally, guess.batch(on, self.plan.step.call_batch), on, self.sharding.readers
        )
        try:
            made = build.make(self.spec, self.facts, self.plan.step, first, slots)
        except Exception:  # made again on the pipelines' batch: a true failure is met there, in the same words
            return None
        return dataclasses.replace(made, expected=guess)

    def model_on(self, data, rest, slots: int) -> build.Model:
        """The model's side made on the pipelines' first batch (the rest's, where one is read first)."""
        first = rest or data
        tally = first.put([call_tally(zero_tally())] * len(self.facts.devices))
        rest_batch = self.plan.data.remainder.batch_per_step if rest else None
        call = build.FirstCall(
            first.first_sample(), tally, first.peek(), data.sharding_spec, self.sharding.readers, rest_batch
        )
        return build.make(self.spec, self.facts, self.plan.step, call, slots)

    def checkpointer(self, asynchronous: bool) -> Checkpointer:
        r, timeout_s = self.spec.resilience, self.spec.distributed.barrier_timeout_s
        paths, kind = RunPaths(self.spec.run_dir), self.plan.data.decoded_cache
        return Checkpointer(paths, r.keep_checkpoints, asynchronous, timeout_s, kind, self.spec.how_to_resume())

    def check_data_set(self, data, listing: Future | None) -> None:
        """A checkpoint's place in the data means samples of one data set: the one its fingerprint names (the
        launcher's --resume checked it too; a SLURM requeue comes here alone). A global order's is its feeds'."""
        if listing:
            data.fingerprint = listing.result()
        if self.start.record:
            start_point.check_data_set(RunPaths(self.spec.run_dir), self.spec, self.start.record, data.fingerprint)

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
