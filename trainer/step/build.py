"""The step's side of a task's build, from its plan: the initial state traced, its partition over the devices
decided (plan/step.py's `partitioned`: the state's shapes are known now), the runners made, the first device call
compiled ahead in a thread; made again with its blocks recomputed where --remat auto's rule asks, once that call
has compiled (`fitted`). It decides nothing: every choice is the plan's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import jax

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.model import registry
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.fit import StateSize, size_words
from dali_launch.trainer.plan.step import StepPlan, partitioned, rematerialised
from dali_launch.trainer.step import compiled, parallel
from dali_launch.trainer.step.initial_state import InitialState
from dali_launch.trainer.step.runner import Runner


class FirstCall(NamedTuple):
    """What the model's side is made for: a one-sample `example` of the images (the init's input), the first
    device call's `tally` and `batch` (arrays, or the expected batch's abstract ones), laid `on` the devices so
    and read by `readers` pipelines per device, and the batch per step of the rest of an epoch begun on another
    layout (None without one)."""

    example: object
    tally: dict
    batch: dict
    on: object
    readers: int = 1
    rest_batch: int | None = None


class Runners(NamedTuple):
    runner: Runner  # the epochs'
    rest: Runner | None  # the rest of an epoch begun on another layout's (None without one)

    @property
    def first(self) -> Runner:
        """The runner of the run's first device call: the one compiled ahead and checked against the pool."""
        return self.rest or self.runner


@dataclass(frozen=True)
class Model:
    initial: InitialState
    plan: StepPlan  # partitioned
    runners: Runners
    ahead: compiled.Ahead  # the first call, compiling
    first_call: FirstCall
    size: StateSize
    expected: object = None  # the batch it was made for ahead of the pipelines (data/expected.py); None: theirs


def make(spec: TaskSpec, facts: Facts, plan: StepPlan, first: FirstCall, slots: int) -> Model:
    """The model's side for epochs of `slots` SGD steps: `spec` as the model is built from it (plan.applied)."""
    initial = InitialState(spec, first.example, slots)  # traced once: its shapes now, its values later
    size = StateSize.of(initial.shapes)
    plan = partitioned(plan, spec.step, facts, size, spec.resilience.checkpoint_async)
    runners = _runners(facts, plan, first, initial.shapes)
    host = size.on_host(plan.partition.mesh, plan.partition.offload)
    args = (first.tally, first.batch)
    ahead = compiled.Ahead(runners.first, initial.shapes, host, args, enabled=spec.xla.compile_cache != "off")
    return Model(initial, plan, runners, ahead, first, size)


def _runners(facts: Facts, plan: StepPlan, first: FirstCall, shapes) -> Runners:
    """The runner the partition names, and the rest's runner (another batch per step, the same partition)."""
    p, devices, job = plan.partition, list(facts.devices), list(facts.job_devices)
    how = {"mesh": p.mesh, "shapes": shapes, "offload": p.offload} if p.parallel == "sharded" else {}
    make_one = lambda batch, **more: parallel.create(p.parallel, devices, job, batch, first.on, **how, **more)
    runner = make_one(plan.batch_per_device_step, readers=first.readers)
    rest = make_one(first.rest_batch) if first.rest_batch else None
    return Runners(runner, rest)


def fitted(spec: TaskSpec, facts: Facts, model: Model, say) -> Model:
    """`model` once its first call has compiled (`spec`: the run's, --remat as asked), where that call fits a
    device; else, under --remat auto and for a
    model that takes it (plan/step.py's `rematerialised`), the model made again with its blocks recomputed (the
    same parameter tree: its state's arrays stay valid); else refused in one line (step/compiled.py)."""
    model.ahead.join()
    takes = registry.takes(registry.load(spec.model.model), "remat")
    plan = rematerialised(model.plan, spec.model.remat, takes, model.ahead.total(), facts.pool_bytes)
    if plan.remat != model.plan.remat:
        say(
            f"--remat auto: blocks; without, the step needs {compiled.words(model.ahead)}, a device has "
            f"{size_words(facts.pool_bytes)}"
        )
        again = make(plan.applied(spec), facts, plan, model.first_call, model.initial.slots)
        model = dataclasses.replace(again, expected=model.expected)
        model.ahead.join()
    hint = "--remat blocks" if model.plan.remat == "none" and takes else ""  # the flag that would keep fewer
    compiled.check(model.ahead, facts.pool_bytes, model.plan.partition.mesh, hint)
    return model


def same_tree(state, model: Model):
    """A state of another model of the same parameter tree (--remat auto's remake) given that model's static parts."""
    return jax.tree.unflatten(jax.tree.structure(model.initial.shapes), jax.tree.leaves(state))
