"""A task's set-up: what the epoch loop (train.py) trains with, built from resolved values and the start point.

Every process calls `set_up`. A fresh start is a start point like any other (epoch 0, no calls done, a
zero tally), so what follows from a checkpoint is decided by the start point (start_point.py) and
restored by the checkpointer, not asked here. A shard-order epoch begun on another layout is finished
with that layout's pipelines, hosted here (data/remainder.py), before this layout's own take over. The
order hides the slow parts of a cold start: the devices' first transfer (a thread) overlaps the pipelines'
build and the model's init, and the first device call compiles (a thread) while the pipelines are built
and the model is initialised: on the batch a built-in pipeline is expected to give (data/expected.py),
confirmed by their first batch, else on that batch once they are built.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from dali_launch.trainer import entry_points
from dali_launch.trainer.config import TaskSpec, replaced
from dali_launch.trainer.data import dali, expected, records, remainder, shards
from dali_launch.trainer.data.expected import Expected
from dali_launch.trainer.data.hosting import ShardLayout
from dali_launch.trainer.data.rows import laid_out
from dali_launch.trainer.model import init_from
from dali_launch.trainer.observe import profile
from dali_launch.trainer.observe.metrics import Reporter
from dali_launch.trainer.observe.startup import Startup
from dali_launch.trainer.resilience import start_point
from dali_launch.trainer.resilience.checkpoint import Checkpointer, zero_tally
from dali_launch.trainer.resilience.start_point import StartPoint
from dali_launch.trainer.resolve import Resolved, checkpoint_async, parallel
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.step import memory_fit, mesh
from dali_launch.trainer.step.evaluate import Evaluator, evaluates, split_dir
from dali_launch.trainer.step.initial_state import InitialState
from dali_launch.trainer.step.layout import held_bytes
from dali_launch.trainer.step.parallel import call_tally, create, finished, state_bytes
from dali_launch.trainer.step.runner import Runner
from dali_launch.trainer.step.state import TrainState
from dali_launch.trainer.topology import job_devices

COMPILE_AHEAD_WAIT_S = 300  # past this the first call compiles by itself


@dataclass(frozen=True)
class Training:
    """Everything the loop runs, built once."""

    spec: TaskSpec  # its learning rate as resolved (elastic.py's rescale rule)
    data: dali.DeviceBatches  # training's pipelines, starting at the start point
    runner: Runner  # step/parallel.py's Pmap or Sharded: how device calls run
    checkpointer: Checkpointer
    evaluator: Evaluator | None  # this process's part (--eval-on all), or process 0's alone; else None
    state: TrainState  # placed on the devices: the checkpoint's, or a fresh one
    tally: dict  # the first epoch's, on the host: the checkpoint's, or a zero one
    schedule: object  # the learning rate of each optimizer update (a host function)
    remainder: tuple | None = None  # (data, runner, steps per call) of the rest of an epoch begun on another layout
    slot_after_remainder: int | None = None  # the step count the next epoch starts at, where the rest ends elsewhere


def set_up(
    spec: TaskSpec, devices: list, reporter: Reporter, startup: Startup, auto: Resolved, start: StartPoint
) -> Training:
    """`devices` are this process's; `auto`: the task's values resolved (resolve.py, stages 1 and 2)."""
    asked_remat, spec = spec.model.remat, auto.resolved(spec)
    process, local, all_devices = jax.process_index(), len(devices), job_devices(devices)
    warm = startup.warm_up(devices)  # the devices' first transfer overlaps the pipelines' build and the init
    sharding = shards.Sharding(process * local, local, len(all_devices), auto.readers_per_device)
    r, timeout_s = spec.resilience, spec.distributed.barrier_timeout_s
    paths = RunPaths(spec.run_dir)
    records.shared.join(spec.run_dir, process, jax.process_count(), timeout_s)
    pool = memory_fit.pool_bytes(devices[0])  # XLA's room on a device, for both of memory_fit's checks
    begin = _begin(spec, all_devices, auto, start)
    model = None if auto.remainder else _ahead(spec, devices, all_devices, sharding, auto, begin, pool)
    data = _pipelines(spec, devices, all_devices, sharding, auto, start, begin)
    rest = _remainder(spec, devices, auto, start, data) if auto.remainder else None
    listing = _listed(spec)  # after the builds: their bad-sample screens open the LMDB too (once a process)
    first = rest or data  # what the first epoch reads
    data.sample = first.sample = first.sample_spec()
    startup.mark("pipelines built")
    _warn_padding(reporter, data, auto, len(all_devices))
    slots = data.steps * auto.steps_per_call  # SGD steps (slots) an epoch
    profile.check(spec, slots)
    if model is None or model.expected != Expected(data.sample, data.steps):  # none, or guessed wrong
        model = _on_batch(spec, devices, all_devices, auto, data, rest, slots, pool)
    initial, runner, shapes = model.initial, model.runners.runner, model.initial.shapes
    asynchronous = checkpoint_async(r.checkpoint_async, state_bytes(shapes))  # resolve.py, stage 3
    checkpointer = Checkpointer(
        paths, r.keep_checkpoints, asynchronous, timeout_s, auto.decoded_cache, spec.how_to_resume()
    )
    # a resume: the checkpoint's values, a sharded state's read as it is laid out (each process its own shards)
    fresh = initial.create() if start.step is None else runner.sharded_shapes(shapes) or initial.placeholders()
    if start.step is None and spec.model.init_from:  # fine-tuning: its variables, this run's optimizer and data
        fresh = init_from.apply(spec, fresh, reporter.say, paths.init_from if process == 0 else None)
    state, tally = checkpointer.restore(start.step, fresh, zero_tally())
    read = (held_bytes(state), state_bytes(shapes)) if start.step is not None else None
    _check_data_set(spec, start, data, listing)  # before the run's files say how it goes on
    state = _continued(state, start, slots, reporter, spec, auto)
    startup.mark("model initialised")
    evaluator = _evaluator(spec, devices, all_devices, auto, runner, shapes) if evaluates(spec, process) else None
    warm.join()
    model, state, spec = _fitted(spec, asked_remat, model, state, pool, reporter)  # the compiled step, checked
    layout, runner, rest_runner = model.runners
    reporter.rank_report(
        sharding=sharding,
        devices=devices,
        batch_size=auto.batch_per_device_step,
        resolved=auto.as_dict(runner.name, asynchronous, str(layout)) | _model_resolved(runner, model, spec),
        state_bytes_per_device=runner.device_bytes(shapes),
        dali=auto.startup_phrase(spec),
    )
    done_before = start.epoch * data.steps + start.calls_done  # device calls
    reporter.track(spec, done_before * auto.steps_per_call, auto.steps_per_call)  # after the checkpoint's
    if start.step is not None:
        reporter.resumed(start.epoch, start.calls_done, start.step, read)
    training = Training(spec, data, runner, checkpointer, evaluator, runner.place(state), tally, fresh.schedule)
    return _with_remainder(training, rest, rest_runner, auto, start, int(state.slot), slots) if rest else training


class Runners(NamedTuple):
    """How device calls run (`_runners`): the state's layout over the mesh, the epochs' runner, and the runner
    of the rest of an epoch begun on another layout (None without one)."""

    layout: mesh.Mesh  # the resolved --mesh
    runner: Runner
    rest: Runner | None

    @property
    def first(self) -> Runner:
        """The runner of the run's first device call: the one compiled ahead and checked against the pool."""
        return self.rest or self.runner


@dataclass(frozen=True)
class Model:
    """The model's side of the set-up: its initial state traced, the runners (`_runners`), the first device
    call compiling in a thread; `remake`: the same made for another spec (--remat auto's second model);
    `expected`: the batch it was made for ahead of the pipelines (None: on theirs)."""

    initial: InitialState
    runners: Runners
    compiling: threading.Thread
    remake: Callable[[TaskSpec], Model]
    expected: Expected | None = None


def _ahead(spec: TaskSpec, devices: list, all_devices: list, sharding, auto: Resolved, begin: dali.Start, pool):
    """The model's side made before the pipelines are built, on the batch they are expected to give
    (data/expected.py): the first call compiles while they are built. None where no guess is made."""
    reader_batch = auto.call_batch // sharding.readers  # dali.build's
    calls = partial(dali.calls_per_epoch, sharding=sharding, reader_batch=reader_batch, start=begin)
    guess = expected.guess(auto.data_config(spec.data), split_dir(spec, "training"), calls)
    if guess is None:
        return None
    on, slots = dali.batch_sharding(all_devices), guess.steps * auto.steps_per_call
    row = lambda x: laid_out(np.shape(x), np.asarray(x).dtype, on)
    tally, batch = jax.tree.map(row, call_tally(zero_tally())), guess.batch(on, auto.call_batch)  # as put() lays them
    try:
        made = _model(spec, devices, all_devices, auto, on, None, guess.example(), slots, pool, tally, batch)
    except Exception:  # made again on the pipelines' batch: a true failure is met there, in the same words
        return None
    return dataclasses.replace(made, expected=guess)


def _on_batch(spec: TaskSpec, devices: list, all_devices: list, auto: Resolved, data, rest, slots: int, pool) -> Model:
    """The model's side made on the pipelines' first batch (the rest's, where one is read first)."""
    first = rest or data
    example, tally = first.first_sample(), first.put([call_tally(zero_tally())] * len(devices))
    return _model(spec, devices, all_devices, auto, data.sharding_spec, rest, example, slots, pool, tally, first.peek())


def _model(spec: TaskSpec, devices, all_devices, auto: Resolved, on, rest, example, slots: int, pool, tally, batch):
    """The initial state traced on `example` for epochs of `slots` SGD steps, the runners (batches laid `on`
    the devices so), and the first call compiling for `tally` and `batch` (arrays, or the expected batch's
    abstract ones)."""
    initial = InitialState(spec, example, slots)  # traced once: its shapes now, its values later
    runners = _runners(spec, devices, all_devices, auto, on, rest, initial.shapes, pool)
    compiling = _compile_ahead(spec, runners.first, initial.shapes, tally, batch)
    again = partial(_model, devices=devices, all_devices=all_devices, auto=auto, on=on, rest=rest, example=example)
    again = partial(again, slots=slots, pool=pool, tally=tally, batch=batch)
    return Model(initial, runners, compiling, again)


def _fitted(spec: TaskSpec, asked_remat: str, model: Model, state: TrainState, pool, reporter: Reporter):
    """`model` once its first call has compiled, `state` and `spec`, where that call fits a device (memory_fit);
    else, under --remat auto and for a model that takes it, the model made again with its blocks recomputed, the
    state given that model's static parts (the same arrays: the parameter tree does not change) and the spec
    saying remat blocks (what the run trains with); else refused."""
    model.compiling.join(timeout=COMPILE_AHEAD_WAIT_S)
    takes = entry_points.model_takes(spec.model.model, "remat")
    if asked_remat == "auto" and takes and not memory_fit.step_fits(model.runners.first, pool):
        spec = replaced(spec, remat="blocks")
        reporter.say(
            f"--remat auto: blocks; without, the step needs {memory_fit.step_words(model.runners.first)}, a device has "
            f"{memory_fit.size(pool)}"
        )
        model = dataclasses.replace(model.remake(spec), expected=model.expected)
        model.compiling.join(timeout=COMPILE_AHEAD_WAIT_S)
        state = jax.tree.unflatten(jax.tree.structure(model.initial.shapes), jax.tree.leaves(state))
    # the flag that would keep fewer activations
    hint = "--remat blocks" if spec.model.remat == "none" and takes else ""
    memory_fit.check_step(model.runners.first, pool, model.runners.layout, hint)
    return model, state, spec


def _runners(
    spec: TaskSpec, devices: list, all_devices: list, auto: Resolved, on, rest, shapes, pool: int | None
) -> Runners:
    """--mesh and --parallel as stage 3 resolves them (resolve.py), and the runners of the epochs and of the
    rest of an epoch begun on another layout (None without one), for batches laid `on` the devices so; a
    mesh whose state cannot fit stops here."""
    layout = mesh.resolve(spec.step.mesh, len(all_devices))  # the launcher checked it: no error left here
    params, total = state_bytes(shapes.params), state_bytes(shapes)
    if mesh.parse(spec.step.mesh) is None and spec.step.parallel != "pmap":  # auto: data parallel while it fits
        layout = memory_fit.fitting(layout, len(all_devices), total, params, pool)
    offload = spec.step.offload
    laid_out = layout.shards_state or offload == "optimizer"  # only one jit program over the mesh can
    name = parallel(spec.step.parallel, bool(shapes.collections), len(all_devices), laid_out)
    make = partial(create, name, devices, all_devices, data_sharding=on, mesh=layout, shapes=shapes)
    runner = make(auto.batch_per_device_step, readers=auto.readers_per_device, offload=offload == "optimizer")

    def need(r: Runner) -> int:  # the state on a device, of what is laid out for it (the rest: --offload's host)
        on_device = r.device_bytes(shapes)
        return memory_fit.need(on_device, on_device + r.host_bytes(shapes), total, params)

    if offload == "auto" and name == "sharded" and not memory_fit.fits(need(runner), pool):  # the last resort
        offloaded = make(auto.batch_per_device_step, readers=auto.readers_per_device, offload=True)
        runner = offloaded if memory_fit.fits(need(offloaded), pool) else runner
    memory_fit.check(layout, len(all_devices), need(runner), total, params, pool)
    return Runners(layout, runner, make(auto.remainder.batch_per_step, offload=runner.offload) if rest else None)


def _evaluator(spec: TaskSpec, devices: list, all_devices: list, auto: Resolved, runner: Runner, shapes) -> Evaluator:
    """This process's part of the evaluation, and the variables' shapes `prepare` compiles it for: a sharded
    state, every process evaluating, is applied as it lies over the job's devices (not gathered)."""
    laid = runner.sharded_shapes(shapes) if spec.eval.eval_on == "all" else None
    evaluated = (laid or shapes).variables(ema=spec.eval.eval_ema)
    readers, data_config = auto.eval_readers_per_device, auto.data_config(spec.data)
    return Evaluator(spec, devices, readers, data_config, evaluated, all_devices if laid is not None else None)


def _model_resolved(runner: Runner, model: Model, spec: TaskSpec) -> dict:
    """rank_map.json's words on the model's side: where the optimizer's state lives (--offload as resolved),
    whether the first call compiled beside the pipelines' build (their batch as expected) or after it, and
    --remat as resolved (_fitted: the spec says what the model was made with)."""
    ahead = "beside the pipelines' build" if model.expected else "on the pipelines' first batch"
    return {
        "offload": "optimizer" if runner.offload else "device",
        "first_call_compiled": ahead,
        "remat": spec.model.remat,
    }


def _with_remainder(training: Training, rest, runner, auto: Resolved, start: StartPoint, slot: int, slots: int):
    """`training` reading first the rest of an epoch begun on another layout (`rest`, stepped by `runner`),
    and where the step count must go after it when the rest's own steps (from `slot`) end elsewhere."""
    k, next_epoch = auto.remainder.steps_per_call, slots * (start.epoch + 1)
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


def _begin(spec: TaskSpec, all_devices: list, auto: Resolved, start: StartPoint) -> dali.Start:
    """Where training's pipelines start: the start point's epoch and calls (after the rest of an epoch begun
    on another layout: the next epoch's start)."""
    return dali.Start(
        spec.data.sample_order,
        spec.step.seed,
        len(all_devices),
        auto.batch_per_device_step,
        auto.steps_per_call,
        epoch=start.epoch,
        call=0 if auto.remainder else start.calls_done,
        offset=start.offset,
        first_global_batch=start.first_global_batch,
        feed_workers=auto.feed_workers,
    )


def _pipelines(spec: TaskSpec, devices: list, all_devices: list, sharding, auto: Resolved, start: StartPoint, begin):
    """Training's pipelines from `begin`, their DALI states where they apply."""
    data = dali.build(
        split_dir(spec, "training"),
        devices,
        all_devices,
        sharding,
        auto.call_batch,
        True,
        auto.data_config(spec.data),
        spec.step.seed,
        checkpoints=start.pipeline_states(sharding.shard_ids, _layout(sharding, auto)),
        start=begin,
    )
    return data


def _listed(spec: TaskSpec) -> Future | None:
    """Shard order: the training set's fingerprint, listed in a thread on process 0 (whose checkpoints are the
    ones written) while the model initialises and the first call compiles: ImageNet's 1.28 M files take
    seconds. Not beside the pipelines' builds: py-lmdb opens a path once per process at a time."""
    if spec.data.sample_order != "shards" or jax.process_index() != 0:
        return None
    return ThreadPoolExecutor(1, "dali-launch-listing").submit(
        start_point.fingerprint_read, spec, Path(split_dir(spec, "training")), records
    )


def _warn_padding(reporter: Reporter, data, auto: Resolved, devices: int) -> None:
    """A line when padding leaves a large share of each epoch's rows empty (shards.padding_warning)."""
    padding = shards.padding_warning(data.num_samples, data.steps, auto.call_batch, devices, auto.steps_per_call)
    if padding:
        reporter.say(padding)


def _check_data_set(spec: TaskSpec, start: StartPoint, data, listing: Future | None) -> None:
    """A checkpoint's place in the data means samples of one data set: the one its fingerprint names (the
    launcher's --resume checked it too; a SLURM requeue comes here alone). A global order's is its feeds'."""
    if listing:
        data.fingerprint = listing.result()
    if start.record:
        start_point.check_data_set(RunPaths(spec.run_dir), spec, start.record, data.fingerprint)


def _remainder(spec: TaskSpec, devices: list, auto: Resolved, start: StartPoint, data):
    """The rest of the start point's epoch, begun on another layout: that layout's pipelines, from their
    states, hosted on this process's devices (resolve.py decided, data/hosting.py says how)."""
    config, states, sample = auto.data_config(spec.data), start.states, start.shards["sample"]
    return remainder.build(
        split_dir(spec, "training"), devices, auto.remainder, config, spec.step.seed, states, data, sample
    )


def _layout(sharding, auto: Resolved) -> ShardLayout:
    """The shard layout this job's training pipelines read."""
    return ShardLayout(sharding.global_devices, sharding.readers, auto.batch_per_device_step, auto.steps_per_call)


def _continued(state: TrainState, start: StartPoint, slots_per_epoch: int, reporter: Reporter, spec: TaskSpec, auto):
    """The restored state, continued on this job's devices: an elastic resume says and records
    (elastic.jsonl) how it goes on, and under another global batch counts its steps anew (start_point.py)."""
    slot = start.rebased_slot(slots_per_epoch)
    if slot is not None:
        state = state.replace(slot=np.asarray(slot, np.int32))
    rest = auto.remainder
    if (start.plan and start.plan.changed) or rest:
        said = [start.plan.describe() if start.plan.changed else "", rest.describe(start.epoch) if rest else ""]
        reporter.say("; ".join(part for part in said if part))
        if jax.process_index() == 0:
            record = {"checkpoint": start.step, "epoch": start.epoch, "position": start.record["position"]}
            extra = {"remainder": rest.as_dict()} if rest else {}
            with RunPaths(spec.run_dir).elastic.open("a") as out:
                out.write(json.dumps({**record, **start.plan.as_dict(), **extra}) + "\n")
    return state


def _compile_ahead(spec: TaskSpec, runner, shapes, tally, batch: dict) -> threading.Thread:
    """Compiles the first device call for a state of `shapes` in a thread while the model is initialised
    (both take seconds on a cold start); the call then finds the program in XLA's persistent cache.
    Without that cache, or where the runner cannot, it does nothing."""
    if spec.xla.compile_cache == "off":
        return finished()
    return runner.compile_ahead(shapes, tally, batch["images"], batch["labels"], batch["valid"])
