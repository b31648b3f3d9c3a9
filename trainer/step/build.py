"""The step's side of a task's build, from its plan: the initial state traced (its shapes: what the plan's partition
weighs), the runners the partition names, the first device call compiled ahead in a thread, and that call checked
against the pool once it has compiled. It decides nothing: set_up.py calls the plan's later stages (the partition,
--remat auto) between these steps and hands each the plan as it stands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.fit import StateSize
from dali_launch.trainer.plan.step import StepPlan
from dali_launch.trainer.step import compiled, parallel
from dali_launch.trainer.step.initial_state import InitialState, Made
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
    initial: InitialState  # its `made`: the model and task the state is made of
    runners: Runners
    ahead: compiled.Ahead  # the first call, compiling
    first_call: FirstCall
    size: StateSize
    expected: object = None  # the batch it was made for ahead of the pipelines (data/expected.py); None: theirs


def traced(spec: TaskSpec, made: Made, first: FirstCall, slots: int) -> InitialState:
    """The initial state of `made`'s model and task for epochs of `slots` SGD steps, traced on the first call's
    example: its shapes now (what the plan's partition weighs), its values later."""
    return InitialState(spec, first.example, slots, made)


def make(spec: TaskSpec, facts: Facts, step: StepPlan, first: FirstCall, initial: InitialState) -> Model:
    """The model's side of `initial` as the partitioned `step` plan lays it out: its runners, its first call
    compiling ahead in a thread."""
    size = StateSize.of(initial.shapes)
    runners = _runners(facts, step, first, initial.shapes)
    host = size.on_host(step.partition.mesh, step.partition.offload)
    args = (first.tally, first.batch)
    ahead = compiled.Ahead(runners.first, initial.shapes, host, args, enabled=spec.xla.compile_cache != "off")
    return Model(initial, runners, ahead, first, size)


def _runners(facts: Facts, step: StepPlan, first: FirstCall, shapes) -> Runners:
    """The runner the partition names, and the rest's runner (another batch per step, the same partition)."""
    p, devices, job = step.partition, list(facts.devices), list(facts.job_devices)
    spread = parallel.Spread(p.mesh, shapes, p.offload) if p.parallel == "sharded" else parallel.Spread()
    made = lambda batch, readers: parallel.create(
        p.parallel, devices, job, batch, first.on, parallel.How(readers, spread)
    )
    runner = made(step.batch_per_device_step, first.readers)
    rest = made(first.rest_batch, 1) if first.rest_batch else None
    return Runners(runner, rest)


def check_fits(model: Model, facts: Facts, step: StepPlan, hint: str) -> None:
    """The first call, compiled, against a device's pool: refused in one line where it does not fit
    (step/compiled.py), `hint` the flag that would keep fewer buffers ("" for none)."""
    model.ahead.join()
    compiled.check(model.ahead, facts.pool_bytes, step.partition.mesh, hint)


def same_tree(state, model: Model):
    """A state of another model of the same parameter tree (--remat auto's remake) given that model's static parts."""
    return jax.tree.unflatten(jax.tree.structure(model.initial.shapes), jax.tree.leaves(state))
