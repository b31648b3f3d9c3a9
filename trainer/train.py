"""Training and evaluation: pmapped steps over every device of every process.

The example's multi-GPU section averages nothing; here each step sums losses and gradients over
the global batch (`lax.psum` over all devices of all processes) and divides by the number of real
samples, so padding never counts and every replica applies the same update.
"""
from __future__ import annotations

import os
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import jax_utils
from flax.training import train_state

from dali_launch.trainer import input_pipeline, replicas
from dali_launch.trainer.checkpoint import Checkpointer, Resume
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.evaluate import AXIS, Evaluator, first, shard_sizes, split_dir, valid_mask
from dali_launch.trainer.metrics import EpochMetrics, Reporter
from dali_launch.trainer.models import create_model
from dali_launch.trainer.preemption import Preemption, requeue_or_exit
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import LAUNCHED_AT, barrier


def create_train_state(spec: TaskSpec, example: np.ndarray) -> train_state.TrainState:
    """The model initialised on `example`, a zero batch of one sample shaped like the pipeline's images."""
    model = create_model(spec.train.model, spec.data.num_classes)
    init = jax.jit(model.init, backend="cpu")  # eager init is seconds on a small CPU; jit is not
    variables = init(jax.random.PRNGKey(spec.train.seed), example)
    if set(variables) != {"params"}:
        raise UsageError(f"--model {spec.train.model} keeps state besides params ({', '.join(sorted(set(variables)))}); "
                         f"models must be stateless: use GroupNorm or LayerNorm instead of BatchNorm")
    params = variables["params"]
    tx = optax.sgd(spec.train.learning_rate, momentum=spec.train.momentum)
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def train_step(state, tally, images, labels, shard_size):
    """One SGD step on the global batch. `tally` (position in the shard, loss and sample sums) stays
    on the device, so a step costs the host one dispatch and no transfer."""
    valid = valid_mask(tally["position"], images.shape[0], shard_size)

    def loss_sum(params):
        logits = state.apply_fn({"params": params}, images)
        return jnp.sum(optax.softmax_cross_entropy(logits, targets(labels, logits.shape[-1])) * valid)

    loss, grads = jax.value_and_grad(loss_sum)(state.params)
    count = jax.lax.psum(jnp.sum(valid), AXIS)
    grads = jax.tree.map(lambda g: jax.lax.psum(g, AXIS) / jnp.maximum(count, 1), grads)
    # A step made only of padding (the tail of a shard read k batches at a time) is no step at all:
    # momentum must not move on a zero gradient.
    stepped = jax.tree.map(lambda new, old: jnp.where(count > 0, new, old), state.apply_gradients(grads=grads), state)
    tally = {"position": tally["position"] + images.shape[0], "loss": tally["loss"] + jax.lax.psum(loss, AXIS),
             "count": tally["count"] + count}
    return stepped, tally


def targets(labels, num_classes: int):
    """One-hot targets: float labels are used as they are, integer class ids are one-hot encoded here."""
    if labels.dtype.kind == "f":
        return labels
    return jax.nn.one_hot(labels.reshape(labels.shape[0]), num_classes)


def train_steps(state, tally, images, labels, shard_size, batch_size: int):
    """Several SGD steps of `batch_size` samples from one larger DALI batch, fused by `lax.scan`:
    the optimisation is the example's, the host dispatches once per DALI batch."""
    steps = images.shape[0] // batch_size
    if steps == 1:  # XLA:CPU runs convolutions inside a scan ~15x slower (a CNN step: 60 vs 1,250 images/s)
        return train_step(state, tally, images, labels, shard_size)
    split = lambda x: x.reshape(steps, batch_size, *x.shape[1:])  # noqa: E731

    def one(carry, batch):
        return train_step(*carry, *batch, shard_size), None

    (state, tally), _ = jax.lax.scan(one, (state, tally), (split(images), split(labels)))
    return state, tally


def per_device_batch(spec: TaskSpec, global_devices: int) -> int:
    gbs = spec.train.global_batch_size
    return gbs // global_devices if gbs else spec.train.batch_size


def zero_tally() -> dict:
    # 0-d arrays rather than numpy scalars: Orbax restores into arrays only
    return {"position": np.zeros((), np.int32), "loss": np.zeros((), np.float32), "count": np.zeros((), np.float32)}


def train_and_evaluate(spec: TaskSpec, devices: list, reporter: Reporter) -> dict:
    """Set-up (resuming from the newest checkpoint if there is one), the epoch loop, the finish.

    `devices` are this process's; every process calls this.
    """
    all_devices = jax.devices(devices[0].platform)
    process, local = jax.process_index(), len(devices)
    sharding = input_pipeline.Sharding(tuple(process * local + k for k in range(local)), len(all_devices))
    batch = per_device_batch(spec, len(all_devices))
    fresh = create_train_state(spec, input_pipeline.example(split_dir(spec, "training"), devices[0], spec.data))
    checkpointer = Checkpointer(RunPaths(spec.run_dir), spec.resilience.keep_checkpoints)
    step, resume = checkpointer.latest(fresh, zero_tally()) or (0, None)
    data = input_pipeline.build(split_dir(spec, "training"), devices, all_devices, sharding,
                                batch * spec.train.steps_per_call, True, spec.data, spec.train.seed,
                                checkpoints=resume.dali if resume else None)
    reporter.rank_report(sharding=sharding, devices=devices, batch_size=batch)
    loop = Loop(spec, data, sharding, checkpointer, reporter, jax.pmap(
        partial(train_steps, batch_size=batch), AXIS, devices=all_devices, donate_argnums=(0, 1)))
    evaluator = Evaluator(spec, devices) if process == 0 else None
    state = jax_utils.replicate(resume.state if resume else fresh, devices=devices)
    first_epoch = resume.epoch if resume else 0
    if resume:
        reporter.resumed(first_epoch, resume.calls_done, step)
    for epoch in range(first_epoch, spec.train.epochs):
        state, metrics = loop.epoch(state, epoch, resume if resume and resume.epoch == epoch else None)
        if evaluator:
            metrics.test_accuracy, metrics.test_count, metrics.eval_time_s = evaluator(state.params)
        barrier(f"epoch-{epoch}-evaluated", spec.distributed.barrier_timeout_s)
        reporter.epoch(metrics)
        loop.save(state, epoch + 1, 0, data.put([zero_tally()] * local))
    return {"checksums": replicas.gathered_checksums(state.params), "final": reporter.last}


class Loop:
    """One epoch of training, with its check points: preemption, periodic checkpoints, device syncs."""

    def __init__(self, spec: TaskSpec, data, sharding, checkpointer: Checkpointer, reporter: Reporter, p_train):
        self.spec, self.data, self.sharding, self.reporter = spec, data, sharding, reporter
        self.checkpointer, self.p_train = checkpointer, p_train
        self.shard_sizes = data.put(shard_sizes(data.num_samples, sharding))
        self.preemption = Preemption()
        k = spec.train.steps_per_call
        # gloo (CPU) deadlocks on long queues of collectives (FIELD-NOTES): wait often there. On
        # GPUs a check point costs a host sync, so they come rarely.
        self.check_every = max(1, (spec.train.sync_every_steps if data.devices[0].platform == "cpu" else 256) // k)
        every = spec.resilience.checkpoint_every_steps
        self.checkpoint_every = max(1, every // k) if every else None
        self.first_call, self.first_step_s = True, None
        self.saved_at = time.monotonic()

    def epoch(self, state, epoch: int, resume: Resume | None):
        start, done = time.perf_counter(), resume.calls_done if resume else 0
        tally = self.data.put([resume.tally if resume else zero_tally()] * len(self.data.devices))
        recorder = replicas.SampleRecorder(self.spec, self.sharding, self.data, epoch, done) \
            if self.spec.train.record_samples else None
        data_wait, compile_s = 0.0, None
        with self.reporter.progress(epoch, self.data.steps, done) as advance:
            for call in range(done, self.data.steps):
                waited = time.perf_counter()
                batch = self.data.next()
                data_wait += time.perf_counter() - waited
                state, tally = self.p_train(state, tally, batch["images"], batch["labels"], self.shard_sizes)
                if compile_s is None and call == done and self.first_call:
                    compile_s = self._first_call_done(tally, waited)
                if recorder:
                    recorder.add(call, batch)
                advance()
                if (call + 1) % self.check_every == 0 and call + 1 < self.data.steps:
                    self._check_point(state, tally, epoch, call + 1, recorder)
        loss, count = first(tally["loss"]), int(first(tally["count"]))
        elapsed = time.perf_counter() - start
        if recorder:
            recorder.save(self.data.steps)
        return state, EpochMetrics(
            epoch=epoch, train_loss=loss / count, train_samples=count, epoch_time_s=elapsed,
            images_per_s=count / elapsed, images_per_s_per_device=count / elapsed / self.sharding.num_shards,
            data_wait_fraction=data_wait / elapsed, compile_s=compile_s,
            first_step_s=self.first_step_s if compile_s is not None else None)

    def _first_call_done(self, tally, started: float) -> float:
        """The first device call of the run compiles: time it once (one sync), and since launch."""
        jax.block_until_ready(tally)
        self.first_call = False
        if LAUNCHED_AT in os.environ:
            self.first_step_s = time.time() - float(os.environ[LAUNCHED_AT])
        return time.perf_counter() - started

    def _check_point(self, state, tally, epoch: int, calls_done: int, recorder) -> None:
        """Reached by every process at the same call: agree on preemption, checkpoint when due."""
        jax.block_until_ready(tally)
        minutes = self.spec.resilience.checkpoint_every_min
        preempted, late = self.preemption.agreed(minutes > 0 and time.monotonic() - self.saved_at > 60 * minutes)
        if preempted or late or (self.checkpoint_every and calls_done % self.checkpoint_every < self.check_every):
            self.save(state, epoch, calls_done, tally)
            if recorder:
                recorder.save(calls_done)
        if preempted:
            requeue_or_exit(self.spec.resilience.max_requeues, self.spec.run_dir)

    def save(self, state, epoch: int, calls_done: int, tally) -> None:
        self.saved_at = time.monotonic()
        self.checkpointer.save(epoch * self.data.steps + calls_done, epoch, calls_done, state, tally,
                               self.data.pipes)
