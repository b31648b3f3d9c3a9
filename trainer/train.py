"""Training and evaluation: pmapped steps over every device of every process.

The example's multi-GPU section averages nothing; here each step sums losses and gradients over
the global batch (`lax.psum` over all devices of all processes) and divides by the number of real
samples, so padding never counts and every replica applies the same update.
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import jax_utils
from flax.training import train_state

from dali_launch.trainer import input_pipeline, replicas
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.metrics import EpochMetrics, Reporter
from dali_launch.trainer.models import create_model
from dali_launch.trainer.topology import barrier

AXIS = "devices"


def create_train_state(spec: TaskSpec, num_features: int) -> train_state.TrainState:
    model = create_model(spec.train.model)
    init = jax.jit(model.init, backend="cpu")  # eager init is seconds on a small CPU; jit is not
    params = init(jax.random.PRNGKey(spec.train.seed), jnp.zeros((1, num_features)))["params"]
    tx = optax.sgd(spec.train.learning_rate, momentum=spec.train.momentum)
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def valid_mask(position, batch_size: int, shard_size):
    """1 for the real samples of a batch starting at `position` of a shard, 0 for DALI's padding."""
    return (position + jnp.arange(batch_size) < shard_size).astype(jnp.float32)


def train_step(state, tally, images, labels, shard_size):
    """One SGD step on the global batch. `tally` (position in the shard, loss and sample sums) stays
    on the device, so a step costs the host one dispatch and no transfer."""
    valid = valid_mask(tally["position"], images.shape[0], shard_size)

    def loss_sum(params):
        logits = state.apply_fn({"params": params}, images)
        return jnp.sum(optax.softmax_cross_entropy(logits, labels) * valid)

    loss, grads = jax.value_and_grad(loss_sum)(state.params)
    count = jax.lax.psum(jnp.sum(valid), AXIS)
    grads = jax.tree.map(lambda g: jax.lax.psum(g, AXIS) / jnp.maximum(count, 1), grads)
    # A step made only of padding (the tail of a shard read k batches at a time) is no step at all:
    # momentum must not move on a zero gradient.
    stepped = jax.tree.map(lambda new, old: jnp.where(count > 0, new, old), state.apply_gradients(grads=grads), state)
    tally = {"position": tally["position"] + images.shape[0], "loss": tally["loss"] + jax.lax.psum(loss, AXIS),
             "count": tally["count"] + count}
    return stepped, tally


def train_steps(state, tally, images, labels, shard_size, batch_size: int):
    """Several SGD steps of `batch_size` samples from one larger DALI batch, fused by `lax.scan`:
    the optimisation is the example's, the host dispatches once per DALI batch."""
    steps = images.shape[0] // batch_size
    split = lambda x: x.reshape(steps, batch_size, *x.shape[1:])  # noqa: E731

    def one(carry, batch):
        return train_step(*carry, *batch, shard_size), None

    (state, tally), _ = jax.lax.scan(one, (state, tally), (split(images), split(labels)))
    return state, tally


def eval_step(apply_fn, params, tally, images, labels, shard_size):
    valid = valid_mask(tally["position"], images.shape[0], shard_size)
    correct = jnp.sum((jnp.argmax(apply_fn({"params": params}, images), -1) == labels) * valid)
    return {"position": tally["position"] + images.shape[0], "correct": tally["correct"] + jax.lax.psum(correct, AXIS),
            "count": tally["count"] + jax.lax.psum(jnp.sum(valid), AXIS)}


def per_device_batch(spec: TaskSpec, global_devices: int) -> int:
    gbs = spec.train.global_batch_size
    return gbs // global_devices if gbs else spec.train.batch_size


def train_and_evaluate(spec: TaskSpec, devices: list, reporter: Reporter) -> dict:
    """Set-up, the epoch loop, the finish. `devices` are this process's; all processes call this."""
    all_devices = jax.devices(devices[0].platform)
    process, local = jax.process_index(), len(devices)
    sharding = input_pipeline.Sharding(tuple(process * local + k for k in range(local)), len(all_devices))
    batch = per_device_batch(spec, len(all_devices))
    data = input_pipeline.build(_split_dir(spec, "training"), devices, all_devices, sharding,
                                batch * spec.train.steps_per_call, True, spec.data, spec.train.seed)
    reporter.rank_report(sharding=sharding, devices=devices, batch_size=batch)
    evaluator = Evaluator(spec, devices) if process == 0 else None

    state = jax_utils.replicate(create_train_state(spec, 784), devices=devices)
    p_train = jax.pmap(partial(train_steps, batch_size=batch), AXIS, devices=all_devices, donate_argnums=(0, 1))
    shard_sizes = data.put(_shard_sizes(data.num_samples, sharding))
    for epoch in range(spec.train.epochs):
        state, metrics = _train_epoch(spec, data, sharding, p_train, state, shard_sizes, epoch, reporter)
        if evaluator:
            metrics.test_accuracy, metrics.test_count, metrics.eval_time_s = evaluator(state.params)
        barrier(f"epoch-{epoch}-evaluated", spec.distributed.barrier_timeout_s)
        reporter.epoch(metrics)
    return {"checksums": replicas.gathered_checksums(state.params), "final": reporter.last}


def _train_epoch(spec: TaskSpec, data, sharding, p_train, state, shard_sizes, epoch: int, reporter: Reporter):
    start = time.perf_counter()
    tally = data.put([{"position": np.int32(0), "loss": np.float32(0), "count": np.float32(0)}] * len(data.devices))
    recorder = replicas.SampleRecorder(spec, sharding, data, epoch) if spec.train.record_samples else None
    # gloo (CPU) deadlocks on long queues of collectives (FIELD-NOTES); GPUs run free.
    calls = max(1, spec.train.sync_every_steps // spec.train.steps_per_call)
    sync_every = calls if data.devices[0].platform == "cpu" else data.steps
    with reporter.progress(epoch, data.steps) as advance:
        for step, batch in enumerate(data.epoch()):
            state, tally = p_train(state, tally, batch["images"], batch["labels"], shard_sizes)
            if recorder:
                recorder.add(step, batch)
            if (step + 1) % sync_every == 0:
                jax.block_until_ready(tally)
            advance()
    loss, count = _first(tally["loss"]), int(_first(tally["count"]))
    elapsed = time.perf_counter() - start
    if recorder:
        recorder.save()
    return state, EpochMetrics(epoch=epoch, train_loss=loss / count, train_samples=count, epoch_time_s=elapsed,
                               images_per_s=count / elapsed)


class Evaluator:
    """Process 0 alone, over its local devices: exact accuracy over the whole test set.

    Built once: its pipelines end every evaluation exactly at the end of their shards.
    """

    def __init__(self, spec: TaskSpec, devices: list):
        local = input_pipeline.Sharding(tuple(range(len(devices))), len(devices))
        self.data = input_pipeline.build(_split_dir(spec, "testing"), devices, devices, local,
                                         spec.train.eval_batch_size, False, spec.data, 0)
        self.shard_sizes = self.data.put(_shard_sizes(self.data.num_samples, local))
        apply_fn = create_model(spec.train.model).apply
        self.p_eval = jax.pmap(partial(eval_step, apply_fn), AXIS, in_axes=(None, 0, 0, 0, 0), devices=devices,
                               donate_argnums=(1,))

    def __call__(self, replicated_params) -> tuple[float, int, float]:
        start = time.perf_counter()
        params = jax.tree.map(lambda x: x.addressable_data(0)[0], replicated_params)
        zero = {"position": np.int32(0), "correct": np.float32(0), "count": np.float32(0)}
        tally = self.data.put([zero] * len(self.data.devices))
        for batch in self.data.epoch():
            tally = self.p_eval(params, tally, batch["images"], batch["labels"], self.shard_sizes)
        total = int(_first(tally["count"]))
        return _first(tally["correct"]) / total, total, time.perf_counter() - start


def _first(x):
    """A psum'd value is the same on every device; read this process's first copy."""
    return np.asarray(x.addressable_data(0)).item()


def _shard_sizes(num_samples: int, sharding: input_pipeline.Sharding) -> np.ndarray:
    """One per local device; pmap scatters host arrays over the local devices."""
    return np.array([input_pipeline.shard_size(num_samples, s, sharding.num_shards) for s in sharding.shard_ids],
                    np.int32)


def _replicated_scalar(value: int, devices):
    return np.full((len(devices),), value, np.int32)


def _split_dir(spec: TaskSpec, split: str) -> str:
    return f"{spec.data.data_dir}/{split}"
