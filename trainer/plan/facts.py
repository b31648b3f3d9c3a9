"""What a task knows of where it runs, gathered once at its start: with the spec and the start point, the plan's
only input, and what travels through the build in place of loose device lists, counts and pools.

The launcher's pre-flight plans with the same rules from the job it is about to start (`Facts` of counts
alone: no devices, no pool, no measured memory), so the two sides agree by construction.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from dali_launch.trainer.data.memory import Room


@dataclass(frozen=True)
class Facts:
    platform: str  # gpu or cpu, decided before JAX started (topology)
    process_index: int = 0
    process_count: int = 1
    local_device_count: int = 1  # this process's devices
    processes_on_host: int = 1  # this job's processes on this host: they share its cores
    cores: int = 1  # the CPU cores this process may use (SLURM's binding included)
    pool_bytes: int | None = None  # XLA's memory pool on one device; None: unknown (CPU devices, the launcher)
    room: Room = Room()  # --decoded-cache's numbers: the decoded split and the memory it may take
    devices: tuple = field(default=(), compare=False)  # this process's JAX devices (none in the launcher)
    job_devices: tuple = field(default=(), compare=False)  # every device of the job, in the data side's order

    @property
    def job_device_count(self) -> int:
        return self.local_device_count * self.process_count

    @property
    def first_device(self) -> int:
        """The job-wide index of this process's first device: device d of the job is `process * local + k`."""
        return self.process_index * self.local_device_count

    @property
    def cores_per_device(self) -> int:
        """This process's cores per local device, when `processes_on_host` processes share the host's."""
        return max(1, self.cores // (self.local_device_count * self.processes_on_host))


def gather(spec, topology, devices: list, job_devices: list) -> Facts:
    """The facts of this task, once JAX has started and its devices are known (task.py: `topology`, where it sits
    in the job, and its devices and the job's): the pool is read from the first device, the decoded split measured
    (data/memory.py) where a decoded cache could be kept."""
    from dali_launch.trainer.data import memory
    from dali_launch.trainer.plan.fit import pool_bytes

    return Facts(
        platform=topology.platform,
        process_index=topology.process_id,
        process_count=topology.num_processes,
        local_device_count=len(devices),
        processes_on_host=topology.processes_on_host,
        cores=len(os.sched_getaffinity(0)),
        pool_bytes=pool_bytes(devices[0]),
        room=memory.measure(spec, devices, topology.processes_on_host),
        devices=tuple(devices),
        job_devices=tuple(job_devices),
    )


def alone(devices: list) -> Facts:
    """The facts of one process that holds `devices` and nothing else of a job (a benchmark's or a test's): its
    cores, no pool read and no decoded split measured."""
    return Facts(
        platform=devices[0].platform,
        local_device_count=len(devices),
        cores=len(os.sched_getaffinity(0)),
        devices=tuple(devices),
        job_devices=tuple(devices),
    )
