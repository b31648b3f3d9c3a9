"""Training and evaluation: the epoch loop over every device of every process.

The steps themselves (and --parallel pmap or sharded) are in parallel.py. The example's multi-GPU
section averages nothing; here every step averages gradients over the whole job's real samples.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.data import dali, label_check, shards
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model import init_from, models
from dali_launch.trainer.model.forward import Forward, train_kwarg
from dali_launch.trainer.observe import replicas
from dali_launch.trainer.observe.input_wait import InputWait
from dali_launch.trainer.observe.metrics import EpochMetrics, Reporter
from dali_launch.trainer.observe.startup import Startup
from dali_launch.trainer.observe.step_log import StepLog
from dali_launch.trainer.resilience import resume_point
from dali_launch.trainer.resilience.checkpoint import Checkpointer, Resume
from dali_launch.trainer.resilience.preemption import Preemption, end
from dali_launch.trainer.resolve import Resolved
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.step import optim, parallel
from dali_launch.trainer.step.evaluate import Evaluator, first, split_dir
from dali_launch.trainer.step.mixing import Mixing
from dali_launch.trainer.step.state import Recipe, TrainState
from dali_launch.trainer.topology import barrier, job_devices

COMPILE_AHEAD_WAIT_S = 300  # past this the first call compiles by itself


def create_train_state(spec: TaskSpec, example: np.ndarray, slots_per_epoch: int) -> TrainState:
    """The model initialised on `example`, a zero batch of one sample shaped like the pipeline's images,
    with the optimizer and schedule for epochs of `slots_per_epoch` SGD steps."""
    model = models.from_spec(spec)
    forward = Forward(model, spec.train.precision)
    params_key = jax.random.PRNGKey(spec.train.seed)  # as before dropout existed: the same initial parameters
    dropout_key = jax.random.fold_in(params_key, 1)
    train_kwargs = {name: False for name in [train_kwarg(model)] if name}  # BatchNorm: keep its initial statistics

    def init(example):
        return model.init_with_output({"params": params_key, "dropout": dropout_key}, example, **train_kwargs)

    logits, variables = jax.jit(init, backend="cpu")(example)  # eager init is seconds on a small CPU; jit is not
    if jnp.shape(logits) != (1, spec.data.num_classes):  # the init's own forward pass: no extra cost
        raise UsageError(
            f"--model {spec.train.model} returns logits of shape {jnp.shape(logits)} for one sample but "
            f"--num-classes is {spec.data.num_classes}; make it return (batch, {spec.data.num_classes}) "
            f"(its last layer num_classes wide)"
        )
    t = spec.train
    recipe = Recipe(
        accumulate_steps=t.accumulate_steps,
        ema_decay=t.ema_decay,
        label_smoothing=t.label_smoothing,
        mixing=Mixing(t.mixup, t.cutmix),
        num_classes=spec.data.num_classes,
    )
    return TrainState.create(
        dict(variables),
        jax.random.fold_in(dropout_key, 2),
        forward,
        optim.optimizer(t),
        optim.schedule(t, slots_per_epoch),
        recipe,
    )


def zero_tally() -> dict:
    """What a checkpoint holds of an epoch's tally."""
    # 0-d arrays rather than numpy scalars: Orbax restores into arrays only
    return {"position": np.zeros((), np.int32), "loss": np.zeros((), np.float32), "count": np.zeros((), np.float32)}


def call_tally(saved: dict | None = None) -> dict:
    """What device calls carry: a checkpoint's tally (or a zero one) and the labels' range, which is
    checked before every checkpoint and so need not be in one (checkpoints keep their old format)."""
    return {**(saved or zero_tally()), "labels": label_check.none()}


def train_and_evaluate(spec: TaskSpec, devices: list, reporter: Reporter, startup: Startup, auto: Resolved) -> dict:
    """Set-up (resuming from the newest checkpoint if there is one), the epoch loop, the finish.

    `devices` are this process's; every process calls this. `auto`: the task's auto values, resolved.
    """
    process, local, all_devices = jax.process_index(), len(devices), job_devices(devices)
    batch = auto.batch_per_device_step
    if auto.lr_scale != 1.0:  # elastic.py's rescale rule
        spec = dataclasses.replace(
            spec, train=dataclasses.replace(spec.train, learning_rate=spec.train.learning_rate * auto.lr_scale)
        )
    spec = dataclasses.replace(spec, train=auto.train_config(spec.train))  # the model's resolved --attention
    warm = startup.warm_up(devices)  # the devices' first transfer overlaps the pipelines' build and the init
    sharding = shards.Sharding(process * local, local, len(all_devices), auto.readers_per_device)
    checkpointer = Checkpointer(RunPaths(spec.run_dir), spec.resilience.keep_checkpoints)
    resume = checkpointer.latest()
    startup.mark("checkpoints read")
    start = resume_point.start(spec, auto, len(all_devices), resume)
    same_pipelines = resume and resume.dali is not None and len(resume.dali) == len(sharding.shard_ids)
    data = dali.build(
        split_dir(spec, "training"),
        devices,
        all_devices,
        sharding,
        auto.call_batch,
        True,
        auto.data_config(spec.data),
        spec.train.seed,
        checkpoints=resume.dali if resume and (same_pipelines or not resume.order) else None,
        start=start,
    )
    startup.mark("pipelines built")
    if resume and resume.order:
        resume_point.check_data_set(data.fingerprint, resume.order)
    example, slots = data.first_sample(), data.steps * auto.steps_per_call  # SGD steps (slots) an epoch
    shapes = jax.eval_shape(partial(create_train_state, spec, slots_per_epoch=slots), example)  # not computed
    auto = auto.with_parallel(spec.train.parallel, bool(shapes.collections), len(all_devices))
    mode = parallel.create(auto.parallel, devices, all_devices, batch, data.sharding_spec, sharding.readers)
    compiling = _compile_ahead(spec, mode, data, shapes)
    fresh = create_train_state(spec, example, slots)
    if resume:
        checkpointer.restore(resume, fresh, zero_tally())
        if auto.elastic:
            resume_point.elastic(spec, reporter, resume, auto.elastic, slots)
    elif spec.train.init_from:  # fine-tuning: its variables, this run's optimizer, step and data
        fresh = init_from.apply(spec, fresh, reporter.say, RunPaths(spec.run_dir).init_from if process == 0 else None)
    startup.mark("model initialised")
    reporter.rank_report(
        sharding=sharding, devices=devices, batch_size=batch, resolved=auto.as_dict(), dali=auto.startup_phrase(spec)
    )
    evaluator = (
        Evaluator(spec, devices, auto.eval_readers_per_device, auto.data_config(spec.data)) if process == 0 else None
    )
    done_before = resume.epoch * data.steps + resume.calls_done if resume else 0  # device calls
    reporter.track(spec, done_before * auto.steps_per_call, auto.steps_per_call)  # after the checkpoint's
    loop = Loop(spec, data, checkpointer, reporter, mode, startup, auto.steps_per_call)
    warm.join()
    compiling.join(timeout=COMPILE_AHEAD_WAIT_S)
    state = mode.place(resume.state if resume else fresh)
    first_epoch = resume.epoch if resume else 0
    if resume:
        reporter.resumed(first_epoch, resume.calls_done, resume.step)
    for epoch in range(first_epoch, spec.train.epochs):
        state, metrics = loop.epoch(state, epoch, resume if resume and resume.epoch == epoch else None)
        if evaluator:
            metrics.test_accuracy, metrics.test_count, metrics.eval_time_s = evaluator(
                mode.replica(state.variables(ema=spec.train.eval_ema))
            )
        # The rate of the epoch's last update (a host computation: the schedule is a plain function).
        last_update = ((epoch + 1) * data.steps * auto.steps_per_call - 1) // spec.train.accumulate_steps
        metrics.learning_rate = float(fresh.schedule(last_update))
        barrier(f"epoch-{epoch}-evaluated", spec.distributed.barrier_timeout_s)
        reporter.epoch(metrics)
        loop.save(state, epoch + 1, 0, data.put([zero_tally()] * local))
        if epoch + 1 < spec.train.epochs:  # a run that is done just finishes
            loop.stop_if_asked(epoch + 1)
    # Every replica of everything a step changes: parameters, BatchNorm statistics, the EMA.
    checked = {"params": state.params, "collections": state.collections, "ema": state.ema}
    return {"checksums": replicas.gathered_checksums(checked), "final": reporter.last}


def _compile_ahead(spec: TaskSpec, mode, data, shapes) -> threading.Thread:
    """Compiles the first device call for a state of `shapes` in a thread while the model is initialised
    (both take seconds on a cold start); the call then finds the program in XLA's persistent cache.
    Without that cache, or where the runner cannot, it does nothing."""
    if spec.train.compile_cache in ("", "off"):
        return parallel.finished()
    batch = data.peek()
    tally = data.put([call_tally()] * len(data.devices))
    return mode.compile_ahead(shapes, tally, batch["images"], batch["labels"], batch["valid"])


class Loop:
    """One epoch of training, with its check points: preemption, periodic checkpoints, device syncs."""

    def __init__(
        self, spec: TaskSpec, data, checkpointer: Checkpointer, reporter: Reporter, mode, startup: Startup, k: int
    ):
        self.spec, self.data, self.sharding, self.reporter = spec, data, data.sharding, reporter
        self.checkpointer, self.mode, self.startup, self.k = checkpointer, mode, startup, k
        self.preemption = Preemption()
        # gloo (CPU) deadlocks on long queues of collectives (FIELD-NOTES): wait often there. On
        # GPUs a check point costs a host sync, so they come rarely.
        self.check_every = max(1, (spec.train.sync_every_steps if data.devices[0].platform == "cpu" else 256) // k)
        every = spec.resilience.checkpoint_every_steps
        self.checkpoint_every = max(1, every // k) if every else None
        self.first_call = True
        self.saved_at = time.monotonic()
        self.step_log = StepLog(spec, reporter.trackers, k, data.steps * k)

    def epoch(self, state, epoch: int, resume: Resume | None):
        start, done = time.perf_counter(), resume.calls_done if resume else 0
        tally = self.data.put([call_tally(resume.tally if resume else None)] * len(self.data.devices))
        counted_before = float(resume.tally["count"]) if resume else 0.0  # by the run that was interrupted
        recorder = (
            replicas.SampleRecorder(self.spec, self.data, epoch, done) if self.spec.train.record_samples else None
        )
        compile_s = None
        before = epoch * self.data.steps  # global device calls before this epoch
        self.step_log.begin_epoch(before + done, resume.tally if resume else None)
        with self.reporter.progress(epoch, self.data.steps, done) as advance, InputWait() as wait:
            for call in range(done, self.data.steps):
                self.reporter.profile.before(before + call)
                batch = wait.fetch(self.data.next, jax.tree.leaves(tally)[0])  # alive until the call donates it
                fetched = time.perf_counter()
                state, tally = self.mode.call(state, tally, batch["images"], batch["labels"], batch["valid"])
                self.reporter.profile.after(before + call, tally)
                if self.first_call:
                    compile_s = self._first_call_done(tally, fetched)
                    self.step_log.compiled(tally, wait.idle_s)
                if recorder:
                    recorder.add(call, batch)
                advance()
                if (call + 1) % self.check_every == 0 and call + 1 < self.data.steps:
                    self._check_point(state, tally, epoch, call + 1, recorder, wait.idle_s)
        self._check_labels(tally)
        loss, count = first(tally["loss"]), int(first(tally["count"]))
        self.step_log.point(before + self.data.steps, tally, wait.idle_s)
        elapsed, timed = time.perf_counter() - start, count - counted_before  # a resumed epoch: its own part
        if recorder:
            recorder.save(self.data.steps)
        return state, EpochMetrics(
            epoch=epoch,
            train_loss=loss / count,
            train_samples=count,
            epoch_time_s=elapsed,
            images_per_s=timed / elapsed,
            images_per_s_per_device=timed / elapsed / self.sharding.global_devices,
            data_wait_fraction=wait.idle_s / elapsed,
            host_wait_fraction=wait.host_s / elapsed,
            compile_s=compile_s,
            resumed_at_call=done or None,
            step=(before + self.data.steps) * self.k,
            **self._startup(compile_s is not None),
        )

    def _first_call_done(self, tally, started: float) -> float:
        """The first device call of the run compiles: time it once (one sync), and since launch."""
        jax.block_until_ready(tally)
        self.first_call = False
        self.startup.mark("first step")
        return time.perf_counter() - started

    def _startup(self, first: bool) -> dict:
        """The start-up phases, with the epoch that took the run's first step."""
        if not first:
            return {}
        launched = self.startup.since == "launch"
        return {
            "startup": self.startup.phases,
            "startup_since": self.startup.since,
            "first_step_s": self.startup.phases["first step"] if launched else None,
        }

    def _check_labels(self, tally) -> None:
        label_check.check(tally["labels"], self.spec.data.num_classes, self.spec.data.pipeline, "training")

    def _check_point(self, state, tally, epoch: int, calls_done: int, recorder, data_wait_s: float) -> None:
        """Reached by every process at the same call: agree on preemption, checkpoint when due."""
        jax.block_until_ready(tally)
        self._check_labels(tally)
        self.step_log.point(epoch * self.data.steps + calls_done, tally, data_wait_s)  # before a preemption ends it
        minutes = self.spec.resilience.checkpoint_every_min
        asked, signum, late = self.preemption.agreed(minutes > 0 and time.monotonic() - self.saved_at > 60 * minutes)
        if asked or late or (self.checkpoint_every and calls_done % self.checkpoint_every < self.check_every):
            self.save(state, epoch, calls_done, tally)
            if recorder:
                recorder.save(calls_done)
        if asked:
            end(asked, signum, epoch * self.data.steps + calls_done, self.spec)

    def stop_if_asked(self, epoch: int) -> None:
        """At an epoch's start, its checkpoint just written: a signal that came after the last check point."""
        asked, signum = self.preemption.agreed()
        if asked:
            end(asked, signum, epoch * self.data.steps, self.spec)

    def save(self, state, epoch: int, calls_done: int, tally) -> None:
        self.saved_at = time.monotonic()
        kept = {k: v for k, v in tally.items() if k in zero_tally()}
        order, step = resume_point.order_record(self.data, epoch, calls_done), epoch * self.data.steps + calls_done
        if order:  # samples, not calls: a count that grows whatever the device count (elastic resumes)
            step = epoch * (self.data.num_samples + 1) + min(order["position"], self.data.num_samples)
        self.checkpointer.save(step, epoch, calls_done, self.mode.replica(state), kept, self.data.pipes, order)
