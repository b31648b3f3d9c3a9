"""Evaluation on every device of every process (or process 0's alone): the task's sums over the whole test set.

Each process reads its devices' shards of the test set (device d of D reads shard d, padded to whole
batches and masked) and sums what its task's `evaluate` gives (tasks/contract.py: the classification task's
correct samples) and its real samples, in one jit program over its own devices: no collective spans processes
while the batches run. One small all-gather per evaluation then adds up every process's sums, so each process
holds the job's and process 0 reports the task's summary of them.
`--eval-on process-0` keeps the old way: process 0's devices read the whole test set, the others wait.

Under a mesh that shards the train state (--mesh fsdp, tensor) with every process evaluating, the variables
are not gathered: the batches span the job's devices as training's do, and one program over all of them
applies the variables as they lie (a model whose parameters do not fit one device is evaluated so).
"""

from __future__ import annotations

import math
import threading
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.data import dali, shards
from dali_launch.trainer.data.batches import Readers
from dali_launch.trainer.data.rows import AXIS, first_row
from dali_launch.trainer.model.forward import Forward
from dali_launch.trainer.plan import Plan
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.step.initial_state import Made
from dali_launch.trainer.step.parallel import finished
from dali_launch.trainer.step.sgd import NONE, bounded, fold
from dali_launch.trainer.step.view import evaluating

PREPARE_WAIT_S = 600  # the evaluation's own build and compile take over past this


def eval_call(task, forward, variables, tally, batch, shard_sizes):
    """One evaluation batch of every local device: each output (devices, rows, ...), shard_sizes (devices, readers).
    `tally` is per device, as the batches; the task's sums and the count are summed over the devices by XLA."""
    rows = batch[task.outputs[0]].shape[1] // shard_sizes.shape[1]
    valid = jax.vmap(shards.valid_mask, (0, 0, None))(tally["position"], shard_sizes, rows)
    flat = lambda x: x.reshape(-1, *x.shape[2:])
    seen = evaluating(forward, variables, flat(valid))  # BatchNorm: its running statistics
    sums = task.evaluate(seen, {name: flat(batch[name]) for name in task.outputs})
    added = lambda kept, x: kept + jnp.broadcast_to(jnp.asarray(x, jnp.float32), kept.shape)  # every device's copy
    return {
        "position": tally["position"] + rows,
        "sums": {name: added(tally["sums"][name], sums[name]) for name in tally["sums"]},
        "count": added(tally["count"], jnp.sum(flat(valid))),
        "bounds": jax.vmap(partial(fold, task))(tally["bounds"], batch),
    }


class Evaluator:
    """This process's part of the evaluation, over its local devices: its shards of the test set.

    Its pipelines, built during the first epoch (`prepare`) or at the first evaluation, end every
    evaluation exactly at the end of their shards. The test split is read without randomness, so when
    this process's decoded batches fit in --eval-cache-mb per device they are kept on its devices after
    the first evaluation, and DALI is done with (each process keeps its own shards).
    """

    def __init__(self, spec: TaskSpec, facts: Facts, plan: Plan, made: Made, variables=None, sharded: bool = False):
        """On this process's `facts` (its devices, the job's, its index), as `plan` decided (plan/eval.py: its batch
        and readers per device; plan/data.py: how its pipelines read), applying `made`'s model and task;
        `variables`: the abstract shapes of what it will evaluate (jax.eval_shape's; with their shardings where
        they lie sharded), for `prepare`; `sharded`: they stay sharded over the job's devices (one program
        evaluates)."""
        self.spec, self.devices, self.data_plan, self.facts = spec, list(facts.devices), plan.data, facts
        self.readers, self.batch = plan.eval.eval_readers_per_device, plan.eval.eval_batch_per_device
        self.mesh_devices, self.sharded = list(facts.job_devices) if sharded else self.devices, sharded
        self.every_process = spec.eval.eval_on == "all" and facts.process_count > 1
        self.eval_devices = len(self.devices) * (facts.process_count if self.every_process else 1)
        self.data = self.shard_sizes = self.cached = None  # the pipelines are built at the first evaluation
        self.variables, self.compiled, self.ready = variables, None, finished()
        self.ahead: dict | None = None  # what `prepare` did, for the first evaluation's metrics
        self.cache_bytes, self.task = spec.eval.eval_cache_mb << 20, made.task
        self.forward = Forward(made.model, spec.model.precision)
        mesh = jax.sharding.Mesh(np.array(self.devices), (AXIS,))
        self.replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        self.eval = jax.jit(partial(eval_call, self.task, self.forward), donate_argnums=(1,))
        self.shapes = None  # {name: shape} of what the task's `evaluate` sums, once known (`_sum_shapes`)

    def __call__(self, variables) -> tuple[dict, int, float]:
        """The task's summary of `variables` (params and any collections: one replica on this process's first
        device, copied to the others, or, sharded, as they lie) over the test set, the samples counted and the
        seconds it took. Every evaluating process calls it."""
        start = time.perf_counter()
        variables = variables if self.sharded else jax.device_put(variables, self.replicated)
        self.settle()
        if self.ahead is not None and "waited_s" not in self.ahead:
            self.ahead["waited_s"] = round(time.perf_counter() - start, 3)
        if self.data is None:
            self._build()
        tally, kept, call = self._zero(variables), [], self.compiled or self.eval
        for batch in self.cached or self.data.epoch():
            tally = call(variables, tally, batch, self.shard_sizes)
            if self.cached is None and self._fits(batch):
                kept.append(batch)
        sums, low, high = self._summed(tally)
        if self.task.bounds is not None:
            self.task.bounds.check(low, high, "testing", self.spec.data.pipeline)
        if self.cached is None and len(kept) == self.data.steps:
            self.cached, self.data.pipes = kept, []  # DALI's threads and buffers go with the pipelines
        return self.task.summary(sums), int(sums["count"]), time.perf_counter() - start

    def _summed(self, tally) -> tuple[dict, dict, dict]:
        """The task's sums with the count, and the lowest and highest value of each bound, over every evaluating
        process: one all-gather, so every process raises the same bounds error, or none does."""
        names = sorted(tally["sums"])
        mine = [np.asarray(first_row(tally["sums"][name]), np.float64) for name in names]
        count = float(np.asarray(first_row(tally["count"])))
        low, high = bounds_seen(tally["bounds"])
        vector = np.concatenate([*(m.reshape(-1) for m in mine), [count]]).astype(np.float32)
        if self.every_process and not self.sharded:  # each process summed its own devices: add them up
            vector = np.asarray(multihost_utils.process_allgather(vector), np.float64).reshape(-1, vector.size).sum(0)
        if self.every_process:
            low, high = _gathered_bounds(low, high)
        sums, at = {}, 0
        for name, m in zip(names, mine):
            sums[name] = vector[at : at + m.size].reshape(m.shape) if m.ndim else float(vector[at])
            at += m.size
        return {**sums, "count": float(vector[at])}, low, high

    def prepare(self) -> None:
        """In a thread, during the first epoch: the pipelines built and the evaluation compiled for the shapes
        given (a ResNet-50's takes seconds), so the first evaluation only evaluates. A failure here is the
        evaluation's to meet: it then builds and compiles as it would have. What it did and how long each part
        took goes in the first epoch's metrics (`eval_ahead`): an evaluation that waited for it shows why."""
        self.ahead = {}

        def work() -> None:
            began = time.perf_counter()
            try:
                if self.data is None:
                    self._build()
                batch = self.data.peek()
                self.ahead["build_s"] = round(time.perf_counter() - began, 3)
                at = lambda x: x.sharding if self.sharded else self.replicated
                shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=at(x)), self.variables)
                lowered = self.eval.lower(shapes, self._zero(shapes), batch, self.shard_sizes)
                self.compiled = lowered.compile()
                self.ahead["compile_s"] = round(time.perf_counter() - began - self.ahead["build_s"], 3)
            except Exception as e:  # recorded; the evaluation builds and compiles itself
                self.ahead["error"] = f"{type(e).__name__}: {e}"[:300]

        if self.variables is not None:
            self.ready = threading.Thread(target=work, name="dali-launch-eval-ahead", daemon=True)
            self.ready.start()

    def settle(self) -> None:
        """The work `prepare` started, finished (or waited for as long as an evaluation would) before the task ends."""
        self.ready.join(timeout=PREPARE_WAIT_S)

    def _zero(self, variables):
        """An evaluation's first tally, per device: nothing summed yet (the task's sums shaped as it gives them)."""
        shapes = self._sum_shapes(variables)
        sums = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
        bounds = {name: np.array(NONE, np.int32) for name in bounded(self.task)}
        zero = {"position": np.int32(0), "sums": sums, "count": np.float32(0), "bounds": bounds}
        return self.data.put([zero] * len(self.data.devices))

    def _sum_shapes(self, variables) -> dict:
        """The shapes of what the task's `evaluate` sums, by name, traced once on a batch's shapes."""
        if self.shapes is None:
            batch = self.data.peek() if self.cached is None else self.cached[0]
            flat = lambda x: jax.ShapeDtypeStruct((x.shape[0] * x.shape[1], *x.shape[2:]), x.dtype)
            outputs = {name: flat(batch[name]) for name in self.task.outputs}
            valid = jax.ShapeDtypeStruct(outputs[self.task.outputs[0]].shape[:1], jnp.float32)
            evaluate = lambda v, b, m: self.task.evaluate(evaluating(self.forward, v, m), b)
            sums = jax.eval_shape(evaluate, variables, outputs, valid)
            self.shapes = {name: tuple(np.shape(value)) for name, value in sums.items()}
        return self.shapes

    def _build(self) -> None:
        """Not at start-up: the job's first step waits for every process's start-up, and a pipeline that
        decodes on the GPU costs ~1 s to build (placement.py). Test shards smaller than --eval-batch-size
        are read in one step of the largest one's size, not padded to it (40 test images and the default
        500: 92 % of every evaluation was padding); every process sizes its program alike."""
        local = len(self.devices)
        first_device = self.facts.process_index * local if self.every_process else 0
        sharding = shards.Sharding(first_device, local, self.eval_devices, self.readers)
        batch = self.batch
        self.data = self._pipelines(sharding, batch)
        fitted = sharding.readers * math.ceil(self.data.num_samples / sharding.num_shards)
        if fitted < batch:
            self.data = self._pipelines(sharding, fitted)
        self.shard_sizes = self.data.shard_sizes()

    def _pipelines(self, sharding: shards.Sharding, batch: int):
        """This process's shards of the test split, `batch` samples a device and step; its arrays span this
        process's devices alone (each process sums its own shards), or the job's (sharded variables)."""
        split = dali.Split(split_dir(self.spec, "testing"), False, batch, 0, self.task.outputs)
        return dali.build(split, Readers(self.devices, self.mesh_devices, sharding), self.data_plan)

    def _fits(self, batch) -> bool:
        per_device = sum(x.nbytes for x in batch.values()) // len(self.mesh_devices)
        return per_device * self.data.steps <= self.cache_bytes


def first(x):
    """A psum'd value is the same on every device; read this process's first copy."""
    return first_row(x).item()


def bounds_seen(seen: dict) -> tuple[dict, dict]:
    """The lowest and highest value of each bound this process's devices saw (laid out one row per device)."""
    low, high = {}, {}
    for name, rows in seen.items():
        values = np.concatenate([np.asarray(shard.data).reshape(-1, 2) for shard in rows.addressable_shards])
        low[name], high[name] = int(values[:, 0].min()), int(values[:, 1].max())
    return low, high


def _gathered_bounds(low: dict, high: dict) -> tuple[dict, dict]:
    """Every process's bounds, joined: one small all-gather."""
    names = sorted(low)
    if not names:
        return low, high
    mine = np.array([[low[n], high[n]] for n in names], np.int32)
    rows = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, len(names), 2)
    return {n: int(rows[:, i, 0].min()) for i, n in enumerate(names)}, {
        n: int(rows[:, i, 1].max()) for i, n in enumerate(names)
    }


def split_dir(spec: TaskSpec, split: str) -> str:
    return f"{spec.data.data_dir}/{split}"
