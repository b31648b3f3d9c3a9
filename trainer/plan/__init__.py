"""Plan, then build: every decision of a task made once, here, and recorded (rank_map.json's "resolved").

A task plans from three inputs and nothing else: its spec (the run's settings), its `Facts` (facts.py: this
process's devices, the job's, the memory pool, the cores, gathered once at its start) and its start point
(resilience/start_point.py). Each concern's rules live in one module, beside the settings of the same name in
trainer/settings/, and set_up.py only builds from what they decided: it compares no `auto`.

    placement.py  before JAX starts: where DALI decodes, CUDA graphs, XLA's options and flags
    step.py       the batch, its fusion, the model's options; then the state's partition over the devices
                  (mesh, parallel, offload) once its shapes are known; then --remat auto once it has compiled
    data.py       DALI's readers and threads per device, their output, the decoded cache, an epoch's remainder
    eval.py       who evaluates, its batch and readers
    fit.py        the arithmetic of a state's bytes per device, which the step's partition weighs
    mesh.py       --mesh parsed and resolved, and which dimension of an array each of its axes splits
    xla_options.py  --xla-options resolved with the placement, before JAX starts

The launcher's pre-flight calls the same rules with the job it plans (step.check, data.check_readers), so the two
sides agree by construction, as the start point's rules do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.plan.data import DataPlan, plan_data
from dali_launch.trainer.plan.eval import EvalPlan, plan_eval
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.step import StepPlan, plan_step


@dataclass(frozen=True)
class Plan:
    platform: str
    data: DataPlan
    step: StepPlan
    eval: EvalPlan

    def record(self) -> dict:
        """What rank_map.json records as "resolved": every decision under its own name."""
        return {"platform": self.platform, **asdict(self.data), **self.step.record(), **asdict(self.eval)}

    def startup_phrase(self, spec: TaskSpec) -> str:
        """How DALI runs and the model's decided options (if it has any), for the task's start-up line."""
        from dali_launch.trainer.data import spectrograms
        from dali_launch.trainer.model import attention, vit

        sides = spectrograms.input_sides(spec.data)
        model = attention.phrase(self.step.attention, vit.tokens(sides, spec.model.vit_pool))
        return "; ".join(p for p in (self.data.phrase(spec.data), model) if p)

    def with_step(self, step: StepPlan) -> Plan:
        """The plan once a later step of the step's rules decided more (plan/step.py: partitioned, rematerialised)."""
        return dataclasses.replace(self, step=step)


def plan(spec: TaskSpec, facts: Facts, placement, start=None) -> Plan:
    """The task's decisions before anything is built: `placement` the first step's (placement.py, made before JAX
    started), `start` where it starts (a fresh start when None)."""
    from dali_launch.trainer.resilience.start_point import StartPoint

    start = start or StartPoint()
    step = plan_step(spec, facts, placement, start)
    data = plan_data(spec, facts, placement.decoder, step, start)
    return Plan(facts.platform, data, step, plan_eval(spec, facts, data, step))
