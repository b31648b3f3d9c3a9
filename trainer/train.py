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


def train_step(state, images, labels, position, shard_size):
    valid = valid_mask(position, images.shape[0], shard_size)

    def loss_sum(params):
        logits = state.apply_fn({"params": params}, images)
        return jnp.sum(optax.softmax_cross_entropy(logits, labels) * valid)

    loss, grads = jax.value_and_grad(loss_sum)(state.params)
    count = jax.lax.psum(jnp.sum(valid), AXIS)
    grads = jax.tree.map(lambda g: jax.lax.psum(g, AXIS) / count, grads)
    return state.apply_gradients(grads=grads), (jax.lax.psum(loss, AXIS), count)


def eval_step(apply_fn, params, images, labels, position, shard_size):
    valid = valid_mask(position, images.shape[0], shard_size)
    logits = apply_fn({"params": params}, images)
    correct = jnp.sum((jnp.argmax(logits, -1) == labels) * valid)
    return jax.lax.psum(correct, AXIS), jax.lax.psum(jnp.sum(valid), AXIS)


def per_device_batch(spec: TaskSpec, global_devices: int) -> int:
    gbs = spec.train.global_batch_size
    return gbs // global_devices if gbs else spec.train.batch_size


def train_and_evaluate(spec: TaskSpec, devices: list, reporter: Reporter) -> dict:
    """Set-up, the epoch loop, the finish. `devices` are this process's; all processes call this."""
    all_devices = jax.devices(devices[0].platform)
    process, local = jax.process_index(), len(devices)
    sharding = input_pipeline.Sharding(tuple(process * local + k for k in range(local)), len(all_devices))
    batch = per_device_batch(spec, len(all_devices))
    data = input_pipeline.build(_split_dir(spec, "training"), devices, all_devices, sharding, batch, True,
                                spec.data, spec.train.seed)
    reporter.rank_report(sharding=sharding, devices=devices, batch_size=batch)

    state = jax_utils.replicate(create_train_state(spec, 784), devices=devices)
    p_train = jax.pmap(train_step, AXIS, devices=all_devices, donate_argnums=(0,))
    shard_sizes = data.put(_shard_sizes(data.num_samples, sharding))
    for epoch in range(spec.train.epochs):
        state, metrics = _train_epoch(spec, data, sharding, p_train, state, shard_sizes, epoch, reporter)
        if process == 0:
            metrics.test_accuracy, metrics.test_count, metrics.eval_time_s = evaluate(spec, devices, state)
        barrier(f"epoch-{epoch}-evaluated", spec.distributed.barrier_timeout_s)
        reporter.epoch(metrics)
    return {"checksums": replicas.gathered_checksums(state.params), "final": reporter.last}


def _train_epoch(spec: TaskSpec, data, sharding, p_train, state, shard_sizes, epoch: int, reporter: Reporter):
    sums, start = [], time.perf_counter()
    recorder = replicas.SampleRecorder(spec, sharding, data, epoch) if spec.train.record_samples else None
    with reporter.progress(epoch, data.steps) as advance:
        for step, batch in enumerate(data.epoch()):
            position = data.put(np.full(len(sharding.shard_ids), step * data.batch_size, np.int32))
            state, out = p_train(state, batch["images"], batch["labels"], position, shard_sizes)
            sums.append(out)
            if recorder:
                recorder.add(step, batch)
            if (step + 1) % spec.train.sync_every_steps == 0:
                jax.block_until_ready(out)  # see FIELD-NOTES: unbounded queues deadlock gloo on CPU
            advance()
    loss = float(sum(_first(s[0]) for s in sums))
    count = int(sum(_first(s[1]) for s in sums))
    elapsed = time.perf_counter() - start
    if recorder:
        recorder.save()
    return state, EpochMetrics(epoch=epoch, train_loss=loss / count, train_samples=count, epoch_time_s=elapsed,
                               images_per_s=count / elapsed)


def evaluate(spec: TaskSpec, devices: list, state) -> tuple[float, int, float]:
    """Process 0 alone, over its local devices: exact accuracy over the whole test set."""
    start = time.perf_counter()
    local = input_pipeline.Sharding(tuple(range(len(devices))), len(devices))
    data = input_pipeline.build(_split_dir(spec, "testing"), devices, devices, local,
                                spec.train.eval_batch_size, False, spec.data, 0)
    params = jax.tree.map(lambda x: x.addressable_data(0)[0], state.params)
    p_eval = jax.pmap(partial(eval_step, state.apply_fn), AXIS, in_axes=(None, 0, 0, 0, 0),
                      devices=devices)
    sizes = data.put(_shard_sizes(data.num_samples, local))
    correct = total = 0
    for step, batch in enumerate(data.epoch()):
        position = data.put(np.full(len(devices), step * data.batch_size, np.int32))
        c, n = p_eval(params, batch["images"], batch["labels"], position, sizes)
        correct, total = correct + _first(c), total + _first(n)
    return float(correct) / total, int(total), time.perf_counter() - start


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
