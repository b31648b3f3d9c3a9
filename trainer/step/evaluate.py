"""Evaluation on every device of every process (or process 0's alone): exact accuracy over the whole test set.

Each process reads its devices' shards of the test set (device d of D reads shard d, padded to whole
batches and masked) and sums its correct and real samples in one jit program over its own devices:
no collective spans processes while the batches run. One small all-gather per evaluation then adds up
every process's counts, so each process holds the job's accuracy and process 0 reports it.
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

from dali_launch.trainer.config import DataConfig, TaskSpec
from dali_launch.trainer.data import contract, dali, label_check, shards
from dali_launch.trainer.entry_points import run_model
from dali_launch.trainer.model.forward import Forward
from dali_launch.trainer.step.parallel import finished

PREPARE_WAIT_S = 600  # the evaluation's own build and compile take over past this


def eval_call(forward, variables, tally, images, labels, shard_sizes):
    """One evaluation batch of every local device: images (devices, rows, ...), shard_sizes (devices, readers).
    `tally` is per device, as the batches; correct and count are summed over the devices by XLA."""
    rows = images.shape[1] // shard_sizes.shape[1]
    valid = jax.vmap(shards.valid_mask, (0, 0, None))(tally["position"], shard_sizes, rows)
    flat = lambda x: x.reshape(-1, *x.shape[2:])
    predicted = jnp.argmax(forward(variables, flat(images), False)[0], -1)  # BatchNorm: its running statistics
    correct = (predicted == contract.class_ids(flat(labels))) * flat(valid)
    per_device = lambda x: jnp.broadcast_to(jnp.sum(x), tally["count"].shape)
    return {
        "position": tally["position"] + rows,
        "correct": tally["correct"] + per_device(correct),
        "count": tally["count"] + per_device(valid),
        "labels": jax.vmap(label_check.fold)(tally["labels"], labels),
    }


class Evaluator:
    """This process's part of the evaluation, over its local devices: its shards of the test set.

    Its pipelines, built during the first epoch (`prepare`) or at the first evaluation, end every
    evaluation exactly at the end of their shards. The test split is read without randomness, so when
    this process's decoded batches fit in --eval-cache-mb per device they are kept on its devices after
    the first evaluation, and DALI is done with (each process keeps its own shards).
    """

    def __init__(self, spec: TaskSpec, devices: list, plan, data_config: DataConfig, variables=None, job=None):
        """`plan`: the evaluation's (plan/eval.py: its batch and readers per device); `data_config`: the spec's,
        its auto values decided (plan/data.py); `variables`: the abstract shapes of what it will evaluate
        (jax.eval_shape's; with their shardings where they lie sharded), for `prepare`; `job`: every device of
        the job, where the variables stay sharded over them (one program evaluates)."""
        self.spec, self.devices, self.data_config = spec, devices, data_config
        self.readers, self.batch = plan.eval_readers_per_device, plan.eval_batch_per_device
        self.mesh_devices, self.sharded = job or devices, job is not None
        self.every_process = spec.eval.eval_on == "all" and jax.process_count() > 1
        self.eval_devices = len(devices) * (jax.process_count() if self.every_process else 1)
        self.data = self.shard_sizes = self.cached = None  # the pipelines are built at the first evaluation
        self.variables, self.compiled, self.ready = variables, None, finished()
        self.ahead: dict | None = None  # what `prepare` did, for the first evaluation's metrics
        self.cache_bytes = spec.eval.eval_cache_mb << 20
        forward = Forward(run_model(spec), spec.model.precision)
        mesh = jax.sharding.Mesh(np.array(devices), (dali.AXIS,))
        self.replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        self.eval = jax.jit(partial(eval_call, forward), donate_argnums=(1,))

    def __call__(self, variables) -> tuple[float, int, float]:
        """Accuracy of `variables` (params and any collections), one replica on this process's first device
        (copied to the others) or, sharded, as they lie; and the samples counted. Every evaluating process calls it."""
        start = time.perf_counter()
        variables = variables if self.sharded else jax.device_put(variables, self.replicated)
        self.settle()
        if self.ahead is not None and "waited_s" not in self.ahead:
            self.ahead["waited_s"] = round(time.perf_counter() - start, 3)
        if self.data is None:
            self._build()
        tally, kept, call = self._zero(), [], self.compiled or self.eval
        for batch in self.cached or self.data.epoch():
            tally = call(variables, tally, batch["images"], batch["labels"], self.shard_sizes)
            if self.cached is None and self._fits(batch):
                kept.append(batch)
        correct, total, low, high = self._summed(tally)
        label_check.check_range(low, high, self.spec.data.num_classes, self.spec.data.pipeline, "testing")
        if self.cached is None and len(kept) == self.data.steps:
            self.cached, self.data.pipes = kept, []  # DALI's threads and buffers go with the pipelines
        return correct / total, total, time.perf_counter() - start

    def _summed(self, tally) -> tuple[int, int, int, int]:
        """(correct, count, lowest and highest class id) over every evaluating process: one all-gather, so
        every process raises the same label error, or none does."""
        low, high = label_check.bounds(tally["labels"])
        mine = np.array([round(first(tally["correct"])), round(first(tally["count"])), low, high], np.int32)
        if not self.every_process:
            return tuple(int(v) for v in mine)
        rows = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, mine.size)
        if self.sharded:  # one program summed every process's counts already
            return int(mine[0]), int(mine[1]), int(rows[:, 2].min()), int(rows[:, 3].max())
        return int(rows[:, 0].sum()), int(rows[:, 1].sum()), int(rows[:, 2].min()), int(rows[:, 3].max())

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
                lowered = self.eval.lower(shapes, self._zero(), batch["images"], batch["labels"], self.shard_sizes)
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

    def _zero(self):
        zero = {"position": np.int32(0), "correct": np.float32(0), "count": np.float32(0), "labels": label_check.none()}
        return self.data.put([zero] * len(self.data.devices))

    def _build(self) -> None:
        """Not at start-up: the job's first step waits for every process's start-up, and a pipeline that
        decodes on the GPU costs ~1 s to build (placement.py). Test shards smaller than --eval-batch-size
        are read in one step of the largest one's size, not padded to it (40 test images and the default
        500: 92 % of every evaluation was padding); every process sizes its program alike."""
        local = len(self.devices)
        first_device = jax.process_index() * local if self.every_process else 0
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
        split = split_dir(self.spec, "testing")
        return dali.build(split, self.devices, self.mesh_devices, sharding, batch, False, self.data_config, 0)

    def _fits(self, batch) -> bool:
        per_device = sum(x.nbytes for x in batch.values()) // len(self.mesh_devices)
        return per_device * self.data.steps <= self.cache_bytes


def first(x):
    """A psum'd value is the same on every device; read this process's first copy."""
    return dali.first_row(x).item()


def split_dir(spec: TaskSpec, split: str) -> str:
    return f"{spec.data.data_dir}/{split}"
