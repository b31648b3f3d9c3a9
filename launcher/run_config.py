"""The launcher's own settings (the checks of their values: route/checks.py), and the task spec they make."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import NamedTuple

from dali_launch.trainer.config import (
    DataConfig,
    DistributedConfig,
    EvalConfig,
    Layout,
    ModelConfig,
    ObserveConfig,
    OptimizerConfig,
    ResilienceConfig,
    Settings,
    StepConfig,
    TaskConfig,
    TaskSpec,
    XlaConfig,
    opt,
    replaced,
    settings_of,
    table_field,
    tables,
)
from dali_launch.trainer.errors import UsageError

# The launcher's commands and checks take the trainer's tables from here, beside the job's own.
__all__ = [
    "NOT_SLURM",
    "RUN_OPTIONS",
    "DataConfig",
    "DistributedConfig",
    "EvalConfig",
    "JobSettings",
    "LaunchConfig",
    "Layout",
    "ModelConfig",
    "ObserveConfig",
    "OptimizerConfig",
    "Panel",
    "ResilienceConfig",
    "RunConfig",
    "SlurmConfig",
    "StepConfig",
    "TaskConfig",
    "TaskSpec",
    "XlaConfig",
    "absolute_paths",
    "counted",
    "marked",
    "node_range",
    "opt",
    "panels",
    "replaced",
    "task_spec",
    "with_devices",
]


@dataclass(frozen=True)
class LaunchConfig:
    nodes: str = opt(
        "1",
        "Hosts for the job: a count, or MIN-MAX for SLURM to pick from at each start.",
        details=(
            "Nodes (hosts) for the job: a count, or MIN-MAX for SLURM to choose from at each start, a requeue "
            "included (the batch rule of --elastic-batch applies to the count given)."
        ),
        int_ok=True,  # a --config file or an older run's config.toml may write a count as a TOML integer
        on_resume="elastic",
    )
    gpus_per_node: int | None = opt(
        None,
        "Devices per node (CPU stand-ins without GPUs). Default: train: all; a job: 1.",
        details=(
            "Devices per node: GPUs; on a machine without GPUs, the CPU devices that stand in for them. "
            "Default: `train` takes every GPU it sees (1 CPU device if none), counted at its start and recorded; a job "
            "(--local, SLURM) takes 1 per node."
        ),
        on_resume="elastic",
    )
    tasks_per_node: int | None = opt(
        None,
        "Processes per node: 1, or one per GPU (--gpus-per-node). Default 1.",
        details="Processes per node: 1 (one task sees all the node's GPUs) or --gpus-per-node (one task per GPU). Default 1.",
        aliases=("--processes",),
        on_resume="elastic",
    )
    local: bool = opt(
        False,
        "Run the job's processes on this machine instead of SLURM.",
        details="Run the job's processes on this machine instead of submitting to SLURM.",
    )
    run_root: str = opt(
        "runs",
        "Folder that holds one directory per run.",
        details="Folder under which each run gets its own directory.",
        path=True,
    )
    name: str = opt(
        "dali-launch",
        "Job name, and the run directory's (status/--resume NAME find it).",
        details="Job name; also names the run directory.",
    )
    local_timeout_s: int = opt(
        3600,
        "--local: stop every process after this many seconds.",
        details="Local mode: stop every process after this many seconds.",
        on_resume="may change",
    )
    dry_run: bool = opt(
        False,
        "Print what would run (batch script, rank map); start nothing.",
        details="Print what would run (batch script, rank map) and start nothing.",
        on_resume="may change",
    )
    resume: str | None = opt(
        None,
        "Continue a run (directory, name or SLURM job id) from its newest checkpoint.",
        details=(
            "Continue the run in this run directory (or of this name under --run-root, or SLURM job id) from its "
            "newest checkpoint, in the mode it "
            "started in (train, --local, SLURM) and with its own configuration. Flags that change "
            "only how long or how it runs (--epochs, timeouts, checkpoints, SLURM knobs) may be "
            "given; others that differ from the run's are refused."
        ),
        on_resume="may change",
    )


@dataclass(frozen=True)
class SlurmConfig:
    """sbatch's knobs, passed to submitit; each one is data, never shell text (setup lines excepted)."""

    partition: str | None = opt(
        None,
        "SLURM partition (default: the cluster's).",
        details="SLURM partition (default: the cluster's default partition).",
        on_resume="may change",
    )
    time_min: int = opt(60, "Job time limit in minutes.", on_resume="may change")
    account: str | None = opt(None, "SLURM account to charge.", on_resume="may change")
    qos: str | None = opt(None, "SLURM quality of service.", on_resume="may change")
    constraint: str | None = opt(
        None,
        "Node features the job needs (sbatch --constraint).",
        on_resume="may change",
    )
    mem_gb: int | None = opt(
        None,
        "Memory per node in GB (default: the partition's).",
        on_resume="may change",
    )
    cpus_per_task: int | None = opt(
        None,
        "CPUs per task (DALI's threads run on them).",
        details="CPUs per task (DALI's reader and decoder threads run on them).",
        on_resume="may change",
    )
    exclusive: bool = opt(
        False,
        "Take whole nodes (sbatch --exclusive).",
        on_resume="may change",
    )
    sbatch_arg: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Extra #SBATCH line KEY=VALUE (repeatable), e.g. mail-type=END.",
            "details": "Extra #SBATCH line as KEY=VALUE (repeatable), e.g. --sbatch-arg mail-type=END.",
            "on_resume": "may change",
        },
    )
    srun_arg: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Extra srun argument (repeatable), e.g. --srun-arg=--mpi=none.",
            "details": "Extra srun argument (repeatable), e.g. --srun-arg=--mpi=none.",
            "on_resume": "may change",
        },
    )
    setup: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Shell line run before the tasks start (repeatable): module loads, venvs.",
            "details": (
                "Shell line run in the batch script before the tasks start (repeatable): module loads, venvs. "
                "It is shell, run as written: quote what must stay data. One line per flag, no newline."
            ),
            "on_resume": "may change",
        },
    )
    container_image: str | None = opt(
        None,
        "Container image for pyxis/enroot (srun --container-image).",
        details="Container image for pyxis/enroot sites (srun --container-image).",
        on_resume="may change",
    )
    detach: bool = opt(
        False,
        "Return once submitted instead of following the job.",
        on_resume="may change",
    )


@dataclass(frozen=True)
class JobSettings:
    """The launcher's own tables: the job's shape and where it runs, and SLURM's knobs."""

    launch: LaunchConfig = table_field(LaunchConfig(), "Job", "docs/scale.md", swept=False)
    slurm: SlurmConfig = table_field(SlurmConfig(), "SLURM", "docs/slurm.md", swept=False)


# The job's tables first, then the trainer's (dataclasses take a class's fields from its bases, the last base first).
@dataclass(frozen=True)
class RunConfig(Settings, JobSettings):
    """Everything one `dali-launch` invocation decided: flags (and later files) resolved. Its tables are the
    trainer's settings (trainer/config.py's Settings: what each task reads) and the job's own."""

    @property
    def tasks_per_node(self) -> int:
        return self.launch.tasks_per_node or 1

    @property
    def node_range(self) -> tuple[int, int]:
        return node_range(self.launch.nodes)

    @property
    def nodes(self) -> int:
        """The most nodes the job may get: what the plan and the per-node checks are made for."""
        return self.node_range[1]

    @property
    def nodes_vary(self) -> bool:
        """--nodes MIN-MAX: SLURM picks the count at each start."""
        low, high = self.node_range
        return low != high

    @property
    def device_counts(self) -> list[int]:
        """Every job device count the node range allows, fewest first."""
        low, high = self.node_range
        return [n * self.devices_per_node for n in range(low, high + 1)]

    @property
    def devices_per_node(self) -> int:
        """Devices each node gives the job: --gpus-per-node as `with_devices` planned it (allocation.py fills in
        an allocation's); 1 where a command reads settings that no run was planned from (`config show`)."""
        return self.launch.gpus_per_node or 1

    @property
    def num_processes(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def devices_per_process(self) -> int:
        return self.devices_per_node // self.tasks_per_node

    @property
    def num_devices(self) -> int:
        return self.nodes * self.devices_per_node


class Panel(NamedTuple):
    """A group of flags (the fields of `classes`) under one heading of --help and docs/flags.md, which names `page`."""

    title: str
    classes: tuple[type, ...]
    page: str = ""

    @property
    def heading(self) -> str:
        return f"{self.title} ({self.page})" if self.page else self.title


def panels(config_class: type) -> tuple[Panel, ...]:
    """A panel per table of `config_class`, as the table's field declares it (trainer/settings/fields.py's table_field)."""
    marks = {f.name: f.metadata for f in fields(config_class)}
    return tuple(Panel(marks[name]["panel"], (cls,), marks[name]["page"]) for name, cls in tables(config_class).items())


# The flags of every command that takes a run's settings, in --help's panels: one per table.
RUN_OPTIONS = panels(RunConfig)
# The flags of a run on this machine (`train`, `task`): SLURM's are its job's alone.
NOT_SLURM = tuple(panel for panel in RUN_OPTIONS if panel.classes != (SlurmConfig,))


def marked(key: str) -> dict[str, object]:
    """Field name -> its `key` metadata (on_resume, path), over every settings class of a run."""
    return {f.name: f.metadata[key] for cls in tables(RunConfig).values() for f in fields(cls) if key in f.metadata}


def node_range(text: str) -> tuple[int, int]:
    """`2` -> (2, 2), `1-4` -> (1, 4); a UsageError for anything else."""
    low, dash, high = str(text).strip().partition("-")
    try:
        bounds = (int(low), int(high if dash else low))
    except ValueError:
        bounds = (0, 0)
    if not 1 <= bounds[0] <= bounds[1]:
        raise UsageError(f"--nodes {text} is not a node count or a MIN-MAX range of counts; write e.g. 2 or 1-2")
    return bounds


def counted(n: int, noun: str) -> str:
    """`1 epoch`, `2 epochs`, `2 processes`: a count with its noun, plural when it is not one."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith('s') else 's'}"


def with_devices(run: RunConfig, here: bool) -> RunConfig:
    """The devices per node a run is planned for, resolved once and recorded (config.toml): --gpus-per-node
    where given; else `train` (`here`: this one process) takes every GPU it would see, one CPU device without
    them, and a job (--local, SLURM) 1 per node. Every check and the task's device count read this."""
    from dataclasses import replace

    from dali_launch.trainer.topology import resolve_platform, visible_gpus

    if run.launch.gpus_per_node is not None:
        return run
    gpus = visible_gpus() if here and resolve_platform(run.distributed.platform) == "gpu" else 1
    return replace(run, launch=replace(run.launch, gpus_per_node=max(gpus, 1)))


def absolute_paths(run: RunConfig) -> RunConfig:
    """`run` with --init-from absolute, as --data-dir is: taken from where dali-launch runs, once, whatever the
    folder of the checks' child or the tasks (a relative one failed in Orbax, and config.toml must record it)."""
    if not run.model.init_from:
        return run
    return replaced(run, init_from=str(Path(run.model.init_from).resolve()))


def task_spec(run: RunConfig, run_dir: str, data_dir: str, backend: str) -> TaskSpec:
    """What every task of this run reads: the run's configs, with the launcher's knowledge filled in.

    `backend` (train, local, slurm) names the environment table the tasks read their rank from.
    """
    from dataclasses import replace

    layout = Layout(
        backend=backend,
        num_processes=None if run.nodes_vary else run.num_processes,  # a range: the tasks count themselves
        local_device_count=run.devices_per_process,
    )
    # The other tables as they are: --compile-cache "" is the run root's, which each task finds (compile_cache.py)
    return TaskSpec(
        run_dir=run_dir, layout=layout, **{**settings_of(run), "data": replace(run.data, data_dir=data_dir)}
    )
