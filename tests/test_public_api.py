"""`import dali_launch` (dali_launch/__init__.py): the public names, light to import; the built-ins by name
(launcher/api/builtins.py); the mode picked from where the Executor runs (launcher/api/modes.py); and several runs
in one call refused, in one line and before anything is written, where they cannot go as one. Their runs:
test_api_runs.py (here), test_api_slurm.py (a job array)."""

from __future__ import annotations

import subprocess
import sys

import flax.linen as nn
import pytest

import dali_launch as dl
from dali_launch.launcher.api import modes
from dali_launch.launcher.api.objects import reference
from dali_launch.trainer.entries import builtin

HEAVY = ("jax", "flax", "nvidia.dali", "typer", "dali_launch.launcher", "dali_launch.trainer")


def test_import_dali_launch_imports_nothing_heavy_and_gives_every_name():
    """The import itself loads none of the launcher, JAX, DALI or Flax; each name arrives when first used."""
    code = (
        "import sys, dali_launch as dl\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
        "dl.Executor, dl.Task, dl.class_ids\n"
        "print(sorted(m for m in ('jax', 'flax', 'nvidia.dali') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == ["[]", "[]"], proc.stdout + proc.stderr
    assert {name: getattr(dl, name).__name__ for name in ("Executor", "Job", "Task", "class_ids")} == {
        "Executor": "Executor",
        "Job": "Job",
        "Task": "Task",
        "class_ids": "class_ids",
    }
    assert set(dl.__all__) <= set(dir(dl))
    with pytest.raises(AttributeError, match=r"^module 'dali_launch' has no attribute 'Exectuor'; its names are "):
        dl.Exectuor  # noqa: B018


def test_the_builtins_by_name_are_what_the_flags_name_and_are_recorded_so():
    """Each mapping lists its kind's names; a value looked up is recorded by its built-in name, as the flag."""
    for kind, mapping in (("model", dl.models), ("task", dl.tasks), ("pipeline", dl.pipelines)):
        assert list(mapping) == list(builtin(kind)) and len(mapping) == len(builtin(kind))
    for kind, mapping, name in (("task", dl.tasks, "segmentation"), ("model", dl.models, "vit-ti16")):
        assert reference(kind, mapping[name]) == name  # vit-ti16: a factory made by a function, no qualname to it
    with pytest.raises(KeyError) as unknown:
        dl.models["resnet-18"]
    assert str(unknown.value).startswith("no built-in model 'resnet-18'; did you mean 'resnet18'? the built-in ")
    assert "resnet18" in dl.models and "resnet-18" not in dl.models
    with pytest.raises(TypeError):
        dl.models["mlp"] = None  # read-only


@pytest.mark.parametrize(
    "environ, sbatch, mode, why",
    [
        ({}, None, "here", "sbatch is not on PATH: one process on this machine"),
        ({"SLURM_JOB_ID": "12"}, None, "here", "sbatch is not on PATH: one process on this machine"),
        ({}, "/usr/bin/sbatch", "slurm", "sbatch is on PATH (/usr/bin/sbatch)"),
        (
            {"SLURM_JOB_ID": "12"},
            "/usr/bin/sbatch",
            "slurm",
            "inside SLURM job 12's allocation, sbatch at /usr/bin/sbatch: a SLURM job of its own",
        ),
    ],
)
def test_the_mode_is_picked_from_where_it_runs(environ, sbatch, mode, why):
    assert modes.pick(environ, lambda command: sbatch if command == "sbatch" else None) == (mode, why)


def test_an_executor_given_no_mode_says_the_one_it_picked(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    executor = dl.Executor(epochs=1)
    assert (executor.mode, executor.picked) == ("here", "sbatch is not on PATH: one process on this machine")
    assert capsys.readouterr().out == (
        "Executor(): mode 'here' (sbatch is not on PATH: one process on this machine); "
        "name a mode to choose: 'here', 'local' or 'slurm'\n"
    )
    assert dl.Executor("train").mode == "here" and dl.Executor("here").picked is None  # the CLI's word for it


def _other():
    class Other(nn.Module):  # defined in a function: sent by value
        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(x)

    return Other


BAD_ARRAYS = [
    ({"learning_rate": [0.1, 0.2], "epochs": [1]}, "map_array's lists are one value per run, so as long as each "
     "other; given learning_rate 2, epochs 1"),
    ({"learning_rate": 0.1}, "map_array takes lists, one value per run: e.g. map_array(learning_rate=[0.05, 0.1, 0.2])"),
    ({"run_root": ["a", "b"]}, "run 1 of one call sets run_root="),
    ({"time_min": [10, 20]}, "run 1 of one call sets time_min=20, run 0 time_min=10; the runs of one call share the "
     "job's shape and where it runs: give time_min to the Executor, or submit that run on its own"),
    ({"model": [_other(), _other()]}, "model=_other.<locals>.Other: the runs of one call send one model by value, "
     "and model=_other.<locals>.Other is sent already; give them the same model, or define each in a module their "
     "tasks can import and pass those"),
]  # fmt: skip


@pytest.mark.parametrize("columns, message", BAD_ARRAYS, ids=[next(iter(c)) + str(len(c)) for c, _ in BAD_ARRAYS])
def test_runs_that_cannot_go_as_one_call_are_refused_before_anything_is_written(
    tmp_path, monkeypatch, columns, message
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(dl.UsageError) as refused:
        dl.Executor("slurm", run_root=tmp_path / "runs").map_array(**columns)
    assert str(refused.value).startswith(message), str(refused.value)
    assert sorted(tmp_path.iterdir()) == []
    with pytest.raises(dl.UsageError, match=r"^submit_array takes a list of dicts of settings, one per run"):
        dl.Executor("here").submit_array([("epochs", 1)])
