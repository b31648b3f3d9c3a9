"""The plan of a task as the tests make it: trainer/plan/ from a spec, on this machine's cores, without JAX's devices."""

from __future__ import annotations

import os

from dali_launch.trainer.plan import Plan, plan
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.placement import place


def planned(spec, platform: str = "cpu", start=None, **facts) -> Plan:
    """`spec`'s plan on `platform` devices (`facts`: Facts's counts, one device of one process by default)."""
    here = Facts(platform, cores=len(os.sched_getaffinity(0)), **facts)
    return plan(spec, here, place(spec, platform), start)
