"""The plan of a task as the tests make it: trainer/plan/ from a spec, on this machine's cores, without JAX's devices."""

from __future__ import annotations

import os

from dali_launch.trainer.entries import Entries
from dali_launch.trainer.plan import Inputs, Plan, plan
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.placement import place
from dali_launch.trainer.resilience.start_point import StartPoint


def inputs(spec, platform: str = "cpu", start=None, **facts) -> Inputs:
    """What `spec`'s task plans from on `platform` devices (`facts`: Facts's counts, one device of one process by
    default), starting at `start` (afresh when None)."""
    here, entries = Facts(platform, cores=len(os.sched_getaffinity(0)), **facts), Entries(spec)
    return Inputs(spec, here, start or StartPoint(), place(spec, platform, entries), entries)


def planned(spec, platform: str = "cpu", start=None, **facts) -> Plan:
    """`spec`'s plan on `platform` devices, its first stage (plan.plan)."""
    return plan(inputs(spec, platform, start, **facts))


def decided(config, **plan):
    """What pipelines are built from where a test gives the decided values itself in `config` (its decoder, reader
    threads, output dtype, and a --decoded-cache SIZE kept where it decodes: host memory on the CPU, DALI's decoder
    cache on GPUs); `plan`: any other DataPlan field."""
    from dali_launch.trainer.data.decided import DECODER, HOST, OFF, DataPlan

    mb = config.decoded_cache_mb() or 0
    cache = {"decoded_cache": (HOST if config.decoder == "cpu" else DECODER) if mb else OFF, "decoded_cache_mb": mb}
    given = {"readers_per_device": config.readers_per_device or 1, "sample_order": config.sample_order} | cache
    return DataPlan(config, config.decoder, config.reader_threads, output_dtype=config.output_dtype, **given | plan)
