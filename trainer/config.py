"""The task spec: plain, frozen, JSON-serialisable dataclasses that the launcher fills and each task reads.

One table per concern, each a frozen dataclass in trainer/settings/ whose fields' `help` is their flags'
(flags stay flat: `--learning-rate`, not `--optimizer.learning-rate`); the plan that decides their `auto`
values is trainer/plan/'s module of the same name. This module imports nothing heavy so the launcher can
build flags from it instantly. Derived values (per-device batch, shard ids) are methods or functions
elsewhere, never fields.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.settings.data import RANDAUGMENT_DEFAULT, DataConfig
from dali_launch.trainer.settings.distributed import DistributedConfig, Layout
from dali_launch.trainer.settings.eval import EvalConfig
from dali_launch.trainer.settings.fields import opt, table_field
from dali_launch.trainer.settings.model import ModelConfig
from dali_launch.trainer.settings.observe import ObserveConfig
from dali_launch.trainer.settings.optimizer import OptimizerConfig
from dali_launch.trainer.settings.resilience import ResilienceConfig
from dali_launch.trainer.settings.step import StepConfig
from dali_launch.trainer.settings.task import TaskConfig
from dali_launch.trainer.settings.xla import XlaConfig

__all__ = [
    "RANDAUGMENT_DEFAULT",
    "TRAINING",
    "DataConfig",
    "DistributedConfig",
    "EvalConfig",
    "Layout",
    "ModelConfig",
    "ObserveConfig",
    "OptimizerConfig",
    "ResilienceConfig",
    "Settings",
    "StepConfig",
    "TaskConfig",
    "TaskSpec",
    "XlaConfig",
    "opt",
    "replaced",
    "settings_of",
    "table_field",
    "tables",
    "tables_of_keys",
]


@dataclass(frozen=True)
class Settings:
    """A run's settings, one table per concern, in --help's order: the task spec holds them (below, config.json),
    and the launcher's run configuration is these and the job's own tables (launcher/run_config.py). A new table is
    one line here: its flags, its --help panel, its --config table and its config.json entry follow from it."""

    data: DataConfig = table_field(DataConfig(), "Data", "docs/data.md")
    model: ModelConfig = table_field(ModelConfig(), "Model", "docs/models.md", was_in_train=True)
    step: StepConfig = table_field(StepConfig(), "Steps", "docs/scale.md", was_in_train=True)
    optimizer: OptimizerConfig = table_field(OptimizerConfig(), "Optimizer", "docs/models.md", was_in_train=True)
    task: TaskConfig = table_field(TaskConfig(), "Task", "docs/tasks.md", was_in_train=True)
    eval: EvalConfig = table_field(EvalConfig(), "Evaluation", "docs/performance.md", was_in_train=True)
    xla: XlaConfig = table_field(XlaConfig(), "XLA", "docs/performance.md", was_in_train=True)
    distributed: DistributedConfig = table_field(DistributedConfig(), "Distributed", "docs/resilience.md")
    resilience: ResilienceConfig = table_field(ResilienceConfig(), "Checkpoints and failures", "docs/resilience.md")
    observe: ObserveConfig = table_field(ObserveConfig(), "Observe", "docs/observability.md", swept=False)


def tables(config_class: type, marked: str = "panel") -> dict[str, type]:
    """Table name -> its settings class, for a class of tables (Settings, TaskSpec, the launcher's RunConfig), in
    its order: each field declared by `table_field` (trainer/settings/fields.py) whose mark `marked` is set."""
    hints = typing.get_type_hints(config_class)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_class) if f.metadata.get(marked)}


def settings_of(config) -> dict:
    """The Settings tables of `config` (a RunConfig, a TaskSpec) by name: what a TaskSpec is made of."""
    return {name: getattr(config, name) for name in tables(Settings)}


# The tables that an earlier version kept as one flat `train` table. Their keys are unique across every table
# (the flags are flat), so an old `train` table splits by key (`_compatible`).
TRAINING = tables(Settings, "was_in_train")


@dataclass(frozen=True, kw_only=True)
class TaskSpec(Settings):
    """Everything one task needs, written once to the run directory as config.json: the run's settings, where the
    run lives, and how its tasks are laid out (what the launcher knows of its job)."""

    run_dir: str
    layout: Layout = Layout()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        return from_dict(cls, _compatible(json.loads(text)))

    def how_to_resume(self) -> str:
        """The command (`quoted`) that continues this run: its directory says everything else (launcher/route/resume.py)."""
        return f"`dali-launch --resume {self.run_dir}`"

    @classmethod
    def load(cls, run_dir: str | Path) -> TaskSpec:
        """The spec in `run_dir`, with `run_dir` where it is now: a run directory may have been moved."""
        from dali_launch.trainer.run_dir import RunPaths

        spec = cls.from_json(RunPaths(run_dir).config.read_text())
        return dataclasses.replace(spec, run_dir=str(Path(run_dir).absolute()))


def replaced(config, **values):
    """`config` (a TaskSpec or the launcher's RunConfig: tables of settings) with each key set in the table that
    holds it, keys named as the flags are: `replaced(spec, learning_rate=0.2, epochs=3)`."""
    hints = typing.get_type_hints(type(config))
    tables = [f.name for f in dataclasses.fields(config) if dataclasses.is_dataclass(hints[f.name])]
    changes: dict[str, dict] = {}
    for key, value in values.items():
        table = next((t for t in tables if key in {f.name for f in dataclasses.fields(hints[t])}), None)
        if table is None:
            raise TypeError(f"no table of {type(config).__name__} has a key {key}")
        changes.setdefault(table, {})[key] = value
    return dataclasses.replace(config, **{t: dataclasses.replace(getattr(config, t), **v) for t, v in changes.items()})


def tables_of_keys() -> dict[str, str]:
    """Key -> the table it now sits in, for every key of the training tables (what an old `train` table held)."""
    return {f.name: table for table, cls in TRAINING.items() for f in dataclasses.fields(cls)}


def split_training(flat: dict) -> dict[str, dict]:
    """An earlier version's flat `train` table as this version's tables (a key no table has stays under `train`,
    where from_dict names it)."""
    where, tables = tables_of_keys(), {}
    for key, value in flat.items():
        tables.setdefault(where.get(key, "train"), {})[key] = value
    return tables


def _compatible(values: dict) -> dict:
    """A config.json as this version reads it, so that run directories of earlier versions still resume and list:
    their one `train` table is split into this version's tables (`split_training`); written before `Layout`,
    the layout sits in `distributed` and the one-process mode is named `none`."""
    values = dict(values)
    for table, keys in split_training(values.pop("train", {})).items():
        values[table] = {**keys, **values.get(table, {})}
    distributed = dict(values.get("distributed", {}))
    moved = {f.name: distributed.pop(f.name) for f in dataclasses.fields(Layout) if f.name in distributed}
    layout = {**moved, **values.get("layout", {})}
    if layout.get("backend") == "none":
        layout["backend"] = "train"
    return {**values, "distributed": distributed, "layout": layout}


def from_dict(cls, values: dict):
    """Rebuilds a (nested) config dataclass; unknown keys are an error, not silently dropped."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {', '.join(unknown)}")
    kwargs = {}
    for name, value in values.items():
        kind = hints[name]
        kwargs[name] = from_dict(kind, value) if dataclasses.is_dataclass(kind) else value
    return cls(**kwargs)
