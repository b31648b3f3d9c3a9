"""How the job's processes meet: the user's settings ([distributed]), and the `Layout` the launcher plans.

trainer/config.py nests both; a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class DistributedConfig:
    """How the job's processes meet: the user's settings. What the launcher fills in is `Layout`; what a
    task learns from its environment is in topology."""

    platform: str = opt(
        "auto",
        "Devices to train on: gpu, cpu, or auto.",
        details="Devices to train on: gpu, cpu, or auto (GPUs if JAX sees any).",
        choices=("auto", "gpu", "cpu"),
    )
    init_timeout_s: int = opt(
        120,
        "Seconds jax.distributed.initialize waits for every process.",
        on_resume="may change",
    )
    heartbeat_timeout_s: int = opt(
        100,
        "Seconds without a heartbeat before JAX declares a process dead.",
        on_resume="may change",
    )
    barrier_timeout_s: int = opt(
        900,
        "Seconds a process waits at a barrier for the others.",
        details="Seconds a process waits at a barrier for the others (the slowest one's evaluation, start-up steps).",
        on_resume="may change",
    )


@dataclass(frozen=True)
class Layout:
    """The job's layout as the launcher planned it (launcher/run_config.py: task_spec): no flag or --config key
    sets it. None: the task finds the value in its environment (topology.from_environment)."""

    backend: str = "train"  # who started the tasks, and so whose variables they read: train (one process), local, slurm
    num_processes: int | None = None  # None: a --nodes range, where the tasks count themselves
    local_device_count: int | None = None  # devices per process (CPU: how many to create); None: every one it sees
    coordinator_address: str | None = None  # host:port of process 0's coordinator; None: from the environment
