"""A task's build: what the epoch loop (train.py) trains with, made from its plan (trainer/plan/) and its inputs.

Every process calls `set_up`. It calls the plan's stages in order -- `plan` before anything is built, `partition`
once the model's shapes are known, `rematerialise` once its first call has compiled -- one Plan passing through
them, and builds each part from the plan as it then stands; it decides nothing itself (every `auto` is the
plan's), and the build never calls back into the plan. It builds in an order that hides the slow parts of a cold start: the devices' first transfer (a thread, begun in task.py as JAX knows
them) overlaps the last imports, the pipelines' build and the model's init; the first device call compiles and
the model initialises (threads, step/build.py and step/initial_state.py) while the pipelines are built: on the
batch a built-in pipeline is expected to give (data/expected.py) or the record of the pipelines' last start
(data/batch_record.py), confirmed by their first batch, else on that batch once they are built. A fresh start is
a start point like any other (epoch 0, no calls done, a zero tally), so what follows from a checkpoint is decided
by the start point (start_point.py) and restored by the checkpointer. A shard-order epoch begun on another layout is finished with
that layout's pipelines, hosted here (data/remainder.py), before this layout's own take over.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future
from dataclasses import dataclass

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.data import records, shards
from dali_launch.trainer.data.batches import DeviceBatches
from dali_launch.trainer.data.expected import Expected
from dali_launch.trainer.model import init_from
from dali_launch.trainer.observe import profile
from dali_launch.trainer.observe.metrics import Reporter
from dali_launch.trainer.observe.startup import Startup
from dali_launch.trainer.parts import Parts, continued, evaluator, listed
from dali_launch.trainer.plan import Inputs, Plan, partition, plan, rematerialise
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.fit import StateSize, size_words
from dali_launch.trainer.resilience.checkpoint import Checkpointer, zero_tally
from dali_launch.trainer.resilience.start_point import StartPoint
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.step import build, compiled
from dali_launch.trainer.step.evaluate import Evaluator
from dali_launch.trainer.step.runner import Runner
from dali_launch.trainer.step.sgd import metrics_kept
from dali_launch.trainer.step.shardings import held_bytes
from dali_launch.trainer.step.state import TrainState


@dataclass(frozen=True)
class Training:
    """Everything the loop runs, built once."""

    spec: TaskSpec  # the run's settings, as given
    facts: Facts  # this process's (its index and the job's process count among them)
    plan: Plan  # every decision, the state's partition and --remat's included
    data: DeviceBatches  # training's pipelines, starting at the start point
    runner: Runner  # step/parallel.py's Pmap or Sharded: how device calls run
    checkpointer: Checkpointer
    evaluator: Evaluator | None  # this process's part (--eval-on all), or process 0's alone; else None
    state: TrainState  # placed on the devices: the checkpoint's, or a fresh one
    tally: dict  # the first epoch's, on the host: the checkpoint's, or a zero one
    schedule: object  # the learning rate of each optimizer update (a host function)
    remainder: tuple | None = None  # (data, runner, steps per call) of the rest of an epoch begun on another layout
    slot_after_remainder: int | None = None  # the step count the next epoch starts at, where the rest ends elsewhere
    listing: Future | None = None  # the training set's fingerprint, being listed: the first checkpoint's to take


def set_up(inputs: Inputs, reporter: Reporter, startup: Startup) -> Training:
    """What the loop runs: the plan's stages called in order (`plan` before anything is built, `partition` once
    the model's shapes are known, `rematerialise` once its first call has compiled), each part built from the plan
    as it then stands, starting at the start point."""
    spec, facts = inputs.spec, inputs.facts
    parts = Parts(inputs, plan(inputs))
    records.shared.join(spec.run_dir, facts.process_index, facts.process_count, spec.distributed.barrier_timeout_s)
    model = None if parts.plan.data.remainder else _ahead(parts)
    data = parts.pipelines()
    rest = parts.remainder(data) if parts.plan.data.remainder else None
    listing = listed(spec, facts)  # after the builds: their bad-sample screens open the LMDB too
    first = rest or data  # what the first epoch reads
    data.sample = first.sample = first.sample_spec()
    startup.mark("pipelines built")
    if not rest:  # what they gave, for their next start (a task's own pipelines alike: batch_record.py)
        parts.record_batches(data)
    _warn_padding(reporter, data, parts.plan)
    slots = data.steps * parts.plan.step.steps_per_call  # SGD steps (slots) an epoch
    profile.check(spec, slots)
    if model is None or model.expected != Expected(data.sample, data.steps):  # none, or guessed wrong
        model = model_on(parts, parts.first_call_on(data, rest), slots)
    checkpointer = parts.checkpointer(parts.plan.step.partition.checkpoint_async)
    state, tally, fresh, read = _state(parts, model, checkpointer, reporter)
    listing = parts.check_data_set(data, listing)  # before the run's files say how it goes on (afresh: unread)
    state = continued(parts, state, slots, reporter)
    startup.mark("model initialised")
    startup.warmed()  # the devices' first transfer, begun as JAX started (task.py)
    evaluated = model.initial.made  # made before --remat's stage: an evaluation takes no gradients to recompute
    settled = _settled(parts, model, reporter.say)  # the compiled step, checked (--remat auto decided)
    if settled is not model:  # --remat auto made it again: the same parameter tree
        state, model = build.same_tree(state, settled), settled
    runner = model.runners.runner
    evaluating = evaluator(parts, runner, model.initial.shapes, evaluated) if parts.plan.eval.evaluates else None
    _report(parts, model, reporter, (data, read))
    training = Training(
        spec, facts, parts.plan, data, runner, checkpointer, evaluating, runner.place(state), tally, fresh.schedule,
        listing=listing,
    )  # fmt: skip
    if rest:
        return _with_remainder(training, rest, model.runners.rest, inputs.start, int(state.slot), slots)
    return training


def model_on(parts: Parts, first: build.FirstCall, slots: int) -> build.Model:
    """The model's side for epochs of `slots` SGD steps, on the first call `first`: its state traced, the plan's
    partition stage on its shapes (parts.plan then holds it), its runners and first call built from that (what
    benchmarks/tasks.py builds too)."""
    made = parts.made()  # the model the plan's options make, the task, the rate's scale
    initial = build.traced(parts.spec, made, first, slots)
    parts.plan = partition(parts.plan, parts.inputs, StateSize.of(initial.shapes))
    return build.make(parts.spec, parts.facts, parts.plan.step, first, initial)


def _ahead(parts: Parts) -> build.Model | None:
    """The model's side made before the pipelines are built, on the batch they are expected to give: the first
    call compiles while they are built. None where no guess is made, or where making it fails (made again on the
    pipelines' batch: a true failure is met there, in the same words)."""
    guessed = parts.first_call_ahead()
    if guessed is None:
        return None
    first, guess = guessed
    try:
        made = model_on(parts, first, guess.steps * parts.plan.step.steps_per_call)
    except Exception:
        return None
    if parts.start.step is None:  # a fresh state is made (a checkpoint's replaces it): its init begins now
        made.initial.start()
    return dataclasses.replace(made, expected=guess)


def _settled(parts: Parts, model: build.Model, say) -> build.Model:
    """`model` once its first call has compiled: the plan's last stage (--remat auto) on what that call needs of a
    device, the model made again where it turns to blocks (the same parameter tree: its state's arrays stay
    valid); then that call checked against the pool (refused in one line where it does not fit)."""
    model.ahead.join()
    before, facts = parts.plan, parts.facts
    parts.plan = rematerialise(before, parts.inputs, model.ahead.total())
    if parts.plan.step.remat != before.step.remat:
        say(
            f"--remat auto: blocks; without, the step needs {compiled.words(model.ahead)}, a device has "
            f"{size_words(facts.pool_bytes)}"
        )
        model = dataclasses.replace(model_on(parts, model.first_call, model.initial.slots), expected=model.expected)
    takes = parts.plan.step.remat == "none" and parts.inputs.entries.takes("remat")
    build.check_fits(model, facts, parts.plan.step, "--remat blocks" if takes else "")  # the flag that keeps fewer
    return model


def _state(parts: Parts, model: build.Model, checkpointer: Checkpointer, reporter: Reporter):
    """The state the run starts from, on the host (or as it lies, a sharded one restored), its first tally, a
    fresh state's structure (what holds the schedule), and what a restore read of the state's bytes: a
    checkpoint's values, or the model's initial ones."""
    start, shapes = parts.start, model.initial.shapes
    # a resume: the checkpoint's values, a sharded state's read as it is laid out (each process its own shards)
    fresh = model.initial.create() if start.step is None else None
    target = fresh or model.runners.runner.restore_shapes(shapes) or model.initial.placeholders()
    if start.step is None and parts.spec.model.init_from:  # fine-tuning: its variables, this run's optimizer and data
        path = RunPaths(parts.spec.run_dir).init_from if parts.facts.process_index == 0 else None
        target = fresh = init_from.apply(parts.spec, fresh, reporter.say, path)
    kept = parts.task.metrics if start.step is None else start.metrics  # a checkpoint's tally as it holds it
    state, tally = checkpointer.restore(start.step, target, zero_tally(kept))
    read = (held_bytes(state), model.size.total) if start.step is not None else None  # what the restore read
    return state, tally, fresh or target, read


def _report(parts: Parts, model: build.Model, reporter: Reporter, read_from: tuple) -> None:
    """rank_map.json's row of this process (where it reads, what was decided, its state's bytes per device), and
    what the loop tracks from where it starts; `read_from`: training's pipelines and what a restore read."""
    (data, read), plan, start = read_from, parts.plan, parts.start
    p = plan.step.partition
    ahead = "beside the pipelines' build" if model.expected else "on the pipelines' first batch"
    reporter.rank_report(
        sharding=parts.sharding,
        devices=list(parts.facts.devices),
        batch_size=plan.step.batch_per_device_step,
        resolved=plan.record() | {"first_call_compiled": ahead},
        state_bytes_per_device=model.size.on_device(p.mesh, p.offload),
        dali=plan.startup_phrase(parts.spec),
    )
    k = plan.step.steps_per_call
    done_before = start.epoch * data.steps + start.calls_done  # device calls
    reporter.track(parts.spec, done_before * k, k)  # after the checkpoint's
    if start.step is not None:
        reporter.resumed(start.epoch, start.calls_done, start.step, read)
    metrics = parts.task.metrics
    if start.step is not None and start.calls_done and metrics and not metrics_kept(start.metrics, parts.task):
        held = f"sums of {', '.join(start.metrics)} only" if start.metrics else "no sums of them"
        why = "an earlier version wrote it" if start.metrics is None else "the task named other metrics then"
        reporter.say(
            f"epoch {start.epoch}'s training metrics ({', '.join(metrics)}) cover the samples trained from here "
            f"on: checkpoint {start.step} holds {held} ({why})"
        )


def _warn_padding(reporter: Reporter, data, plan: Plan) -> None:
    """A line when padding leaves a large share of each epoch's rows empty (shards.padding_warning)."""
    devices, k = data.sharding.global_devices, plan.step.steps_per_call
    padding = shards.padding_warning(data.num_samples, data.steps, plan.step.call_batch, devices, k)
    if padding:
        reporter.say(padding)


def _with_remainder(training: Training, rest, runner, start: StartPoint, slot: int, slots: int):
    """`training` reading first the rest of an epoch begun on another layout (`rest`, stepped by `runner`),
    and where the step count must go after it when the rest's own steps (from `slot`) end elsewhere."""
    k, next_epoch = training.plan.data.remainder.steps_per_call, slots * (start.epoch + 1)
    ends_at = slot + (rest.steps - start.calls_done) * k
    after = next_epoch if ends_at != next_epoch else None
    return dataclasses.replace(training, remainder=(rest, runner, k), slot_after_remainder=after)


def finish_remainder(run: Training, state):
    """After the rest of an epoch begun on another layout: its pipelines closed, and the step count set to
    where this layout's next epoch starts (a rescaled rest takes another number of steps)."""
    run.remainder[0].close()
    if run.slot_after_remainder is None:
        return state
    return state.replace(slot=state.slot - state.slot + run.slot_after_remainder)  # on the devices, as it was
