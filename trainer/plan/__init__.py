"""Plan, then build: every decision of a task made once, here, and recorded (rank_map.json's "resolved").

A task plans from its `Inputs` and nothing else: its spec (the run's settings), its `Facts` (facts.py: this
process's devices, the job's, the memory pool, the cores, gathered once at its start), its start point
(resilience/start_point.py), its placement and its model, task and pipeline (entries.py). Each concern's rules live in one module, beside the settings of the same name in
trainer/settings/, and set_up.py only builds from what they decided: it compares no `auto`.

    placement.py  before JAX starts: where DALI decodes, CUDA graphs, XLA's options and flags
    step.py       the batch, its fusion, the model's options; then the state's partition over the devices
                  (mesh, parallel, offload) once its shapes are known; then --remat auto once it has compiled
    data.py       DALI's readers and threads per device, their output, the decoded cache, an epoch's remainder
    eval.py       who evaluates, its batch and readers
    fit.py        the arithmetic of a state's bytes per device, which the step's partition weighs
    mesh.py       --mesh parsed and resolved, and which dimension of an array each of its axes splits
    xla_options.py  --xla-options resolved with the placement, before JAX starts

set_up.py calls the three stages in order (`plan`, `partition`, `rematerialise`), one Plan passing through them,
and builds from what they decided. The launcher's pre-flight calls the same rules with the job it plans
(step.check, data.check_readers), so the two sides agree by construction, as the start point's rules do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, NamedTuple

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.plan import step as step_rules
from dali_launch.trainer.plan.data import DataPlan, plan_data
from dali_launch.trainer.plan.eval import EvalPlan, plan_eval
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.fit import StateSize
from dali_launch.trainer.plan.step import StepPlan, plan_step

if TYPE_CHECKING:
    from dali_launch.trainer.entries import Entries
    from dali_launch.trainer.plan.placement import Placement
    from dali_launch.trainer.resilience.start_point import StartPoint


class Inputs(NamedTuple):
    """What a task plans from, and nothing else: its spec, its facts, where it starts, the placement decided before
    JAX started (placement.py), and its model, task and pipeline (entries.py: each resolved once)."""

    spec: TaskSpec
    facts: Facts
    start: StartPoint
    placement: Placement
    entries: Entries


@dataclass(frozen=True)
class Plan:
    platform: str
    data: DataPlan
    step: StepPlan
    eval: EvalPlan

    def record(self) -> dict:
        """What rank_map.json records as "resolved": every decision under its own name."""
        return {"platform": self.platform, **self.data.record(), **self.step.record(), **asdict(self.eval)}

    def startup_phrase(self, spec: TaskSpec) -> str:
        """How DALI runs and the model's decided options (if it has any), for the task's start-up line."""
        from dali_launch.trainer.data import spectrograms
        from dali_launch.trainer.model import attention, vit

        sides = spectrograms.input_sides(spec.data)
        model = attention.phrase(self.step.attention, vit.tokens(sides, spec.model.vit_pool))
        return "; ".join(p for p in (self.data.phrase(), model) if p)


def plan(inputs: Inputs) -> Plan:
    """The plan's first stage: the task's decisions before anything is built."""
    spec, facts, start, placement, entries = inputs
    step = plan_step(spec, facts, placement, start)
    data = plan_data(spec, facts, placement.decoder, step, start, entries.pipeline)
    return Plan(facts.platform, data, step, plan_eval(spec, facts, data, step))


def alone(spec: TaskSpec, devices: list) -> Inputs:
    """What one process that holds `devices` and nothing else of a job plans from (a benchmark's): its facts
    (facts.alone), a fresh start, the placement on their platform and the spec's own model, task and pipeline."""
    from dali_launch.trainer.entries import Entries
    from dali_launch.trainer.plan import facts, placement
    from dali_launch.trainer.resilience.start_point import StartPoint

    entries = Entries(spec)
    where = placement.place(spec, devices[0].platform, entries)
    return Inputs(spec, facts.alone(devices), StartPoint(), where, entries)


def partition(plan_: Plan, inputs: Inputs, size: StateSize) -> Plan:
    """The plan's second stage, once the train state's shapes are known (`size`): how it lies on the devices
    (plan/step.py's `partitioned`)."""
    spec = inputs.spec
    step = step_rules.partitioned(plan_.step, spec.step, inputs.facts, size, spec.resilience.checkpoint_async)
    return dataclasses.replace(plan_, step=step)


def rematerialise(plan_: Plan, inputs: Inputs, step_bytes: int | None) -> Plan:
    """The plan's last stage, once the first device call has compiled needing `step_bytes` on a device (XLA's
    count; None: not known): --remat auto (plan/step.py's `rematerialised`)."""
    takes = inputs.entries.takes("remat")
    step = step_rules.rematerialised(plan_.step, inputs.spec.model.remat, takes, step_bytes, inputs.facts.pool_bytes)
    return dataclasses.replace(plan_, step=step)
