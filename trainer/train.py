"""Training and evaluation: the epoch loop over every device of every process.

set_up.py builds what it runs; the steps themselves (and --parallel pmap or sharded) are in
step/parallel.py. The loop starts at the start point, whatever it is: a fresh start is epoch 0 with no
calls done and a zero tally. The example's multi-GPU section averages nothing; here every step
averages gradients over the whole job's real samples.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax

from dali_launch.trainer import compile_cache
from dali_launch.trainer.epoch_boundary import Boundary
from dali_launch.trainer.observe import replicas
from dali_launch.trainer.observe.input_wait import InputWait
from dali_launch.trainer.observe.metrics import EpochMetrics, Reporter
from dali_launch.trainer.observe.startup import Startup
from dali_launch.trainer.observe.step_log import StepLog
from dali_launch.trainer.plan import Inputs
from dali_launch.trainer.resilience.checkpoint import KEPT, Snapshot, order_record, shard_record, zero_tally
from dali_launch.trainer.resilience.diverged import NanGuard
from dali_launch.trainer.resilience.preemption import Preemption, end
from dali_launch.trainer.resilience.start_point import StartPoint
from dali_launch.trainer.set_up import Training, finish_remainder, set_up
from dali_launch.trainer.step.evaluate import bounds_seen, first
from dali_launch.trainer.step.sgd import call_tally, metrics_kept
from dali_launch.trainer.topology import barrier


def train_and_evaluate(inputs: Inputs, reporter: Reporter, startup: Startup) -> dict:
    """The build, the epoch loop from the start point, the finish: every process calls this, with what it plans
    from (trainer/plan/: its spec, facts, start point, placement and entries)."""
    run = set_up(inputs, reporter, startup)
    try:
        return _train(run, reporter, startup, inputs.start)
    finally:  # a thread still inside DALI or XLA as the interpreter exits aborts it: a failing run's exit 2 became SIGABRT
        if run.evaluator:
            run.evaluator.settle()


def _train(run: Training, reporter: Reporter, startup: Startup, start: StartPoint) -> dict:
    """The epoch loop from the start point, and the finish."""
    spec, data, k, task = run.spec, run.data, run.plan.step.steps_per_call, run.state.recipe.task
    devices = data.devices
    loop = Loop(run, reporter, startup)
    loop.after_first_step = run.evaluator.prepare if run.evaluator else None  # evaluation ready during epoch 0
    if run.remainder:  # an epoch begun on another layout: its rest is read with that layout's pipelines
        loop.read_with(*run.remainder)
    state, calls_done, tally, pending = run.state, start.calls_done, run.tally, None
    for epoch in range(start.epoch, spec.step.epochs):
        state, metrics = loop.epoch(state, epoch, calls_done, tally, pending)
        calls_done, tally = 0, zero_tally(task.metrics)  # every later epoch from its start
        if run.remainder and epoch == start.epoch:  # the next epoch reads this layout's own shards
            state = finish_remainder(run, state)
            loop.read_with(data, run.runner, k)
        evaluated = _evaluated(run, state)
        if run.evaluator:
            metrics.test, metrics.test_count, metrics.eval_time_s = run.evaluator(evaluated)
            metrics.headline, metrics.unit = task.headline_of(metrics.test), task.unit
            metrics.better = task.better_for(metrics.headline)
            metrics.eval_devices, metrics.eval_sharded = run.evaluator.eval_devices, run.evaluator.sharded
            metrics.eval_ahead, run.evaluator.ahead = run.evaluator.ahead, None  # the first evaluation's alone
        # The rate of the epoch's last update (a host computation: the schedule is a plain function).
        last_update = ((epoch + 1) * data.steps * k - 1) // spec.optimizer.accumulate_steps
        metrics.learning_rate = float(run.schedule(last_update))
        compile_cache.write_pending()  # another process's programs, before process 0 publishes (after the barrier)
        barrier(f"epoch-{epoch}-evaluated", spec.distributed.barrier_timeout_s)
        metrics.checkpoint_wait_s = run.checkpointer.take_wait_s()  # the last epoch's end checkpoint and this one's
        metrics.bad_samples = sum(len(scan.bad) for scan in data.left_out)  # training's own pipelines'
        reporter.epoch(metrics, left_out(run))
        pending = loop.epoch_end(state, epoch + 1, data.put([zero_tally(task.metrics)] * len(devices)))
    run.checkpointer.wait()  # the last checkpoint complete on disk before the task reports done
    compile_cache.publish(spec, run.facts.process_index, settled_s=0)
    # Every replica of everything a step changes: parameters, BatchNorm statistics, the EMA.
    # A sharded state (--mesh fsdp) is gathered first: each device's copy is then that of a data-parallel group.
    checked = run.runner.whole({"params": state.params, "collections": state.collections, "ema": state.ema})
    copies = run.plan.step.partition.mesh.data  # data-parallel replicas (an fsdp or tensor group holds one)
    checksums = replicas.gathered_checksums(checked, run.facts.process_count)
    return {"checksums": checksums, "final": reporter.last, "replicas": copies}


def left_out(run) -> tuple:
    """The scans of every sample the run's readers leave out (--bad-samples skip): training's, evaluation's."""
    evaluated = run.evaluator.data if run.evaluator and run.evaluator.data else None
    return run.data.left_out + (evaluated.left_out if evaluated else ())


class Pending(NamedTuple):
    """The checkpoint that starts an epoch, taken, written once that epoch's first `calls` calls are dispatched."""

    snapshot: Snapshot
    calls: int


class Loop:
    """One epoch of training, with its sync points: preemption, periodic checkpoints, device syncs."""

    def __init__(self, run: Training, reporter: Reporter, startup: Startup):
        spec, data, k = run.spec, run.data, run.plan.step.steps_per_call
        self.spec, self.reporter, self.checkpointer, self.startup = spec, reporter, run.checkpointer, startup
        self.task, self.preemption, self.facts = run.state.recipe.task, Preemption(run.facts.process_count), run.facts
        self.read_with(data, run.runner, k)
        self.first_call, self.after_first_step = True, None
        self.saved_at = time.monotonic()
        self.step_log = StepLog(spec, reporter.trackers, k, run.schedule)
        learning_rate = spec.optimizer.learning_rate * run.plan.step.lr_scale  # what the run trains with
        self.nan_guard = NanGuard(spec, k, run.checkpointer.wait, learning_rate)
        self.boundary = Boundary(spec.data.prefetch)
        self.listing = run.listing  # set_up.py's listing of the training set, until a checkpoint takes it

    def read_with(self, data, runner, k: int) -> None:
        """The epochs from here read `data` and step with `runner`, `k` SGD steps a call (set_up.py: the rest
        of an epoch begun on another layout is read with that layout's pipelines, then this one's)."""
        self.data, self.sharding, self.runner, self.k = data, data.sharding, runner, k
        # gloo (CPU) deadlocks on long queues of collectives: wait often there. On
        # GPUs a sync point costs a host sync, so they come rarely: every 256 steps, or as often
        # as --checkpoint-every-steps asks (checkpoints are written at sync points).
        self.sync_every = max(1, (self.spec.step.sync_every_steps if data.devices[0].platform == "cpu" else 256) // k)
        every = self.spec.resilience.checkpoint_every_steps
        self.checkpoint_every = max(1, every // k) if every else None
        self.sync_every = min(self.sync_every, self.checkpoint_every or self.sync_every)

    def epoch(self, state, epoch: int, done: int, saved: dict, pending: Pending | None = None):
        """Epoch `epoch` from device call `done` on, its tally so far `saved` (a checkpoint's, or a zero one);
        `pending`: the checkpoint that starts it, written once its first `pending.calls` calls are dispatched."""
        start = time.perf_counter()
        tally = self.data.put([call_tally(saved, self.task)] * len(self.data.devices))
        counted_before = float(saved["count"])  # by the run that was interrupted, if any
        # the metric sums of the samples before `done`, or (an earlier version's checkpoint kept none) of those after
        metrics_before = 0.0 if metrics_kept(saved.get("metrics"), self.task) else counted_before
        recording = (self.spec, self.data, epoch, done, self.facts.process_index)
        recorder = replicas.SampleRecorder(*recording) if self.spec.step.record_samples else None
        compile_s = None
        before = epoch * self.data.steps  # global device calls before this epoch
        self.step_log.begin_epoch(before + done, saved)
        self.nan_guard.begin(before + done)
        between, behind = None, pending.calls if pending else 0  # between: set as the first call is dispatched
        with self.reporter.progress(epoch, self.data.steps, done, self.k) as advance, InputWait() as wait:
            for call in range(done, self.data.steps):
                self.reporter.profile.before(before + call)
                batch = wait.fetch(self.data.next, jax.tree.leaves(tally)[0])  # alive until the call donates it
                fetched = time.perf_counter()
                state, tally = self.runner.call(state, tally, batch)
                self.reporter.profile.after(before + call, tally)
                if call == done:
                    between = self.boundary.resumed()
                at_sync = (call + 1) % self.sync_every == 0 and call + 1 < self.data.steps
                if pending and (call + 1 - done == pending.calls or at_sync):  # the devices busy with them meanwhile
                    pending = self._written(pending)  # before any later checkpoint: their steps only grow
                if self.first_call:
                    compile_s = self._first_call_done(tally, fetched)
                    self.step_log.compiled(tally, wait.idle_s)
                if recorder:
                    recorder.add(call, batch)
                advance()
                if at_sync:
                    self._sync_point(state, tally, epoch, call + 1, recorder, wait.idle_s)
        if pending:  # an epoch of fewer calls than the write was to hide behind
            self._written(pending)
        loss, count, skipped = self._ended(tally, epoch, self.data.steps - done, wait.idle_s)
        elapsed, timed = time.perf_counter() - start, count - counted_before  # a resumed epoch: its own part
        summed = count - metrics_before
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
            between_epochs_s=between,
            checkpoint_behind_calls=behind,
            resumed_at_call=done or None,
            step=(before + self.data.steps) * self.k,
            skipped_steps=skipped,
            train_metrics={name: first(value) / summed for name, value in tally["metrics"].items()} if summed else {},
            **self._startup(compile_s is not None),
        )

    def _ended(self, tally, epoch: int, calls: int, idle_s: float) -> tuple[float, int, int]:
        """An epoch's end, `calls` device calls after it (re)started: its bounds, NaNs and last scalars checked
        before its checkpoint; the loss, sample and skipped-step sums."""
        self._check_bounds(tally)
        loss, count, skipped = first(tally["loss"]), int(first(tally["count"])), int(first(tally["skipped"]))
        self.boundary.ended(calls)
        end = (epoch + 1) * self.data.steps
        self.nan_guard.check_epoch(loss, count, skipped, end, epoch)
        self.step_log.point(end, tally, idle_s)
        return loss, count, skipped

    def _first_call_done(self, tally, started: float) -> float:
        """The first device call of the run compiles: time it once (one sync), and since launch."""
        jax.block_until_ready(tally)
        self.first_call = False
        self.startup.mark("first step")
        if self.after_first_step:
            self.after_first_step()
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

    def _check_bounds(self, tally) -> None:
        """What the task bounds (the classification task's class ids), as this process's devices saw it."""
        if self.task.bounds is not None and tally["bounds"]:
            low, high = bounds_seen(tally["bounds"])
            self.task.bounds.check(low, high, "training", self.spec.data.pipeline)

    def _sync_point(self, state, tally, epoch: int, calls_done: int, recorder, data_wait_s: float) -> None:
        """Reached by every process at the same call: agree on preemption, checkpoint when due."""
        jax.block_until_ready(tally)
        self.checkpointer.check()  # a write that failed in the background: one line now, not at the next save
        self._check_bounds(tally)
        self.nan_guard.check(first(tally["loss"]), epoch * self.data.steps + calls_done, epoch)  # before any save
        self.step_log.point(epoch * self.data.steps + calls_done, tally, data_wait_s)  # before a preemption ends it
        minutes = self.spec.resilience.checkpoint_every_min
        asked, signum, late = self.preemption.agreed(minutes > 0 and time.monotonic() - self.saved_at > 60 * minutes)
        if asked or late or (self.checkpoint_every and calls_done % self.checkpoint_every < self.sync_every):
            self.save(state, epoch, calls_done, tally)
            if recorder:
                recorder.save(calls_done)
        if asked:
            self.checkpointer.wait()  # "checkpoint written" means on disk
            end(asked, signum, epoch * self.data.steps + calls_done, self.spec)

    def epoch_end(self, state, epoch: int, tally) -> Pending | None:
        """The checkpoint that starts epoch `epoch`, taken now, and what is agreed at an epoch's start: a signal
        that came after the last sync point ends the task here, its checkpoint written; else the checkpoint is
        written now, or returned to be written once the next epoch's first calls run (epoch_boundary.py's rule)."""
        snapshot = self.checkpointer.snapshot(*self._checkpoint(state, epoch, 0, tally))
        if epoch >= self.spec.step.epochs:  # a run that is done just finishes
            return self._written(Pending(snapshot, 0))
        ahead = self.boundary.calls_ahead(self.checkpointer.last_write_s) if snapshot.detached else 0
        asked, signum, calls = self.preemption.agreed(ahead)  # every process alike: the calls hold collectives
        if asked or not calls:
            self._written(Pending(snapshot, 0))
        if asked:
            self.checkpointer.wait()  # "checkpoint written" means on disk
            end(asked, signum, epoch * self.data.steps, self.spec)
        return Pending(snapshot, calls) if calls else None

    def _written(self, pending: Pending) -> None:
        """`pending`'s checkpoint written, and this epoch's programs published for the run root's next runs."""
        self.checkpointer.write(pending.snapshot)
        compile_cache.publish(self.spec, self.facts.process_index)

    def save(self, state, epoch: int, calls_done: int, tally) -> None:
        self.checkpointer.save(*self._checkpoint(state, epoch, calls_done, tally))

    def _checkpoint(self, state, epoch: int, calls_done: int, tally) -> tuple:
        """Checkpointer.save's arguments for a checkpoint at call `calls_done` of epoch `epoch`."""
        if self.listing is not None:  # the training set's fingerprint, listed while the run started
            self.data.fingerprint, self.listing = self.listing.result(), None
        self.saved_at = time.monotonic()
        kept = {k: v for k, v in tally.items() if k in KEPT}
        order, step = order_record(self.data, epoch, calls_done), epoch * self.data.steps + calls_done
        if order:  # samples, not calls: a count that grows whatever the device count (elastic resumes)
            step = epoch * (self.data.num_samples + 1) + min(order["position"], self.data.num_samples)
        shards, saved = shard_record(self.data, calls_done), self.runner.saved(state)
        position = {"epoch": epoch, "calls_done": calls_done, "order": order, "shards": shards}
        return step, saved, kept, self.data.pipes, position


def _evaluated(run: Training, state):
    """The variables an evaluation applies: as they lie where this process evaluates a sharded state over the
    job's devices (--eval-on all: every process does, or none), else one replica, which every process gathers
    from a sharded state (a gather takes them all), whether it evaluates or not."""
    evaluated = state.variables(ema=run.spec.eval.eval_ema)
    as_it_lies = run.evaluator is not None and run.evaluator.sharded
    if (run.evaluator or run.runner.sharded) and not as_it_lies:
        return run.runner.replica(evaluated)
    return evaluated
