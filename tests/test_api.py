"""The Python API's settings and objects (launcher/api/), before anything runs: the CLI's settings by field name
make the CLI's run configuration, a bad one is one line, and an object is named as the run will record it --
by reference where its tasks can import it, by value otherwise -- or refused, in one line, where a fresh
interpreter with the tasks' environment cannot load it. Runs: test_api_runs.py (here, local), test_api_slurm.py."""

from __future__ import annotations

import dataclasses
import re
import threading

import flax.linen as nn
import pytest
from conftest import dali_launch

from dali_launch.launcher import cli
from dali_launch.launcher.api import Executor, UsageError
from dali_launch.launcher.route import launch, sent_objects
from dali_launch.trainer.model.models import MLP
from dali_launch.trainer.tasks.classification import classification


class ModuleLevelNet(nn.Module):
    """Importable here (pytest put tests/ on sys.path), not by the tasks' fresh interpreter."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x)


@pytest.fixture
def cli_run(monkeypatch):
    """The run configuration the CLI builds from its flags, captured where it would be run."""

    def run(*argv: str):
        seen = {}
        monkeypatch.setattr(launch, "new_run", lambda run, here=False: seen.setdefault("run", run) and 0)
        assert cli.main(list(argv)) == 0
        return seen["run"]

    return run


def test_the_settings_make_the_clis_run(cli_run, tmp_path):
    """Each mode's settings, a --config file among them, give the RunConfig the CLI's flags give."""
    toml = tmp_path / "run.toml"
    toml.write_text("[step]\nepochs = 4\nbatch_size = 64\n[data]\nprefetch = 2\n")
    here = Executor("here", config=toml, batch_size=50).run_config(model="cnn", processes=1)
    assert here == cli_run("train", "--config", str(toml), "--batch-size", "50", "--model", "cnn", "--processes", "1")
    local = Executor("local", gpus_per_node=2, processes=2)
    local.update(epochs=3, learning_rate=1)  # an int where a float is due, as TOML's and Typer's
    assert local.run_config(sbatch_arg=("mail-type=END",)) == cli_run(
        "--local", "--gpus-per-node", "2", "--processes", "2", "--epochs", "3", "--learning-rate", "1",
        "--sbatch-arg", "mail-type=END",
    )  # fmt: skip
    slurm = Executor("slurm", nodes=2, gpus_per_node=8, partition="gpu").run_config(time_min=30, run_root=tmp_path)
    assert slurm == cli_run(
        "--nodes", "2", "--gpus-per-node", "8", "--partition", "gpu", "--time-min", "30", "--run-root", str(tmp_path)
    )  # fmt: skip


BAD = [
    ("here", {"epoch": 3}, "Executor('here') has no setting epoch; did you mean epochs?"),
    ("here", {"partition": "gpu"}, "partition is a SLURM setting: Executor('slurm') takes it, Executor('here') does not"),
    ("local", {"epochs": "3"}, "epochs='3' is a str; give an int, e.g. epochs=5"),
    ("local", {"global_batch_size": 6.5}, "global_batch_size=6.5 is a float; give an int or None, e.g. global_batch_size=1"),
    ("slurm", {"parallel": "pmapp"}, "parallel='pmapp' is not one of auto, sharded, pmap; did you mean 'pmap'?"),
    ("here", {"local": True}, "local: the Executor's mode says where a run goes; use Executor('local', ...)"),
    ("here", {"resume": "runs/r"}, "resume: the Python API starts new runs; continue one with `dali-launch --resume RUN`"),
    ("hre", {}, "Executor('hre'): no such mode; use one of 'here', 'local', 'slurm'; did you mean 'here'?"),
    ("here", {"model": 3}, "model=3 is an int; give a Flax module class or factory, or a name as --model takes it (one of "
     "mlp, cnn, cnn-nnx, resnet18, resnet50, vit-ti16, vit-s16, vit-b16, unet, simclr-cnn, centernet, st-cnn, frame-mean, vivit-ti16, audio-cnn, or package.module:attribute)"),
    ("here", {"config": "/nowhere/run.toml"},
     "--config /nowhere/run.toml cannot be read (No such file or directory); give an existing TOML file"),
]  # fmt: skip


@pytest.mark.parametrize("mode, settings, message", BAD, ids=[str(list(s)) for _, s, _ in BAD])
def test_a_bad_setting_is_one_line_and_nothing_is_written(tmp_path, mode, settings, message):
    with pytest.raises(UsageError) as refused:
        Executor(mode, run_root=tmp_path / "runs").submit(**settings)
    assert str(refused.value) == message
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "[launch]\nlocal = true\n",
            "sets local = true; local: the Executor's mode says where a run goes; use Executor",
        ),
        (
            "[launch]\ndry_run = true\n",
            "sets dry_run; dry_run: the Python API starts runs; see what one would run with",
        ),
    ],
)
def test_a_config_file_says_neither_where_a_run_goes_nor_that_it_is_dry(tmp_path, text, message):
    (tmp_path / "run.toml").write_text(text)
    with pytest.raises(UsageError, match=f"^--config {tmp_path / 'run.toml'} {re.escape(message)}"):
        Executor("slurm", config=tmp_path / "run.toml", run_root=tmp_path / "runs").submit()
    assert not (tmp_path / "runs").exists()


def test_an_object_its_tasks_import_is_named_as_the_flag_would_name_it(tmp_path, monkeypatch):
    """A built-in by its own name; a module's function as module:qualname, once its folder is on PYTHONPATH."""
    (tmp_path / "makers.py").write_text("from dali_launch.trainer.model.models import CNN\n\ndef cnn(num_classes):\n"
                                        "    return CNN(num_classes=num_classes)\n")  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    import makers

    run = Executor("here").run_config(model=MLP, task=classification)
    assert (run.model.model, run.task.task) == ("mlp", "classification")
    run = Executor("here").run_config(model=makers.cnn)
    assert run.model.model == "makers:cnn"
    sent_objects.check(run)  # a fresh interpreter imports it


def test_an_object_defined_here_is_sent_by_value(tmp_path):
    """A class inside a function, and a Task instance, go by value: `<run>:KIND`, loaded by a fresh interpreter."""

    class Local(nn.Module):
        num_classes: int = 10

        @nn.compact
        def __call__(self, x):
            return nn.Dense(self.num_classes)(x)

    run = Executor("here").run_config(model=Local, task=classification(num_classes=10))
    assert (run.model.model, run.task.task) == ("<run>:model", "<run>:task")
    assert [s.kind for s in sent_objects.of(run)] == ["model", "task"]
    sent_objects.check(run)


def test_a_module_only_this_process_imports_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """ModuleLevelNet's module is this test file, which a fresh interpreter cannot import: every other check
    passes, then the run is refused in one line that names the object, its module and the fix."""
    root = tmp_path / "runs"
    with pytest.raises(UsageError) as refused:
        Executor("here", run_root=root).submit(model=ModuleLevelNet)
    assert str(refused.value).startswith(
        "model=ModuleLevelNet (imported as test_api:ModuleLevelNet) refers to module test_api, which its tasks "
        "cannot import (working directory "
    ) and str(refused.value).endswith("); put its folder on PYTHONPATH or install it"), refused.value
    assert "\n" not in str(refused.value) and not root.exists()


def test_what_an_object_sent_by_value_uses_must_be_importable_by_its_tasks(tmp_path, monkeypatch):
    (tmp_path / "widths.py").write_text("HIDDEN = 32\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import widths

    class Uses(nn.Module):
        num_classes: int = 10

        @nn.compact
        def __call__(self, x):
            return nn.Dense(self.num_classes)(nn.Dense(widths.HIDDEN)(x))

    run = Executor("here").run_config(model=Uses)
    with pytest.raises(UsageError) as refused:
        sent_objects.check(run)
    label = Uses.__qualname__
    assert str(refused.value).startswith(f"model={label} (sent by value) refers to module widths, which its tasks")
    assert str(refused.value).endswith(
        f"put its folder on PYTHONPATH or install it, or define what {label} uses from it beside {label}"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    sent_objects.check(run)


def test_an_object_that_cannot_be_pickled_is_one_line():
    lock = threading.Lock()

    def locked(num_classes):
        with lock:
            return MLP(num_classes=num_classes)

    with pytest.raises(UsageError) as refused:
        Executor("here").run_config(model=locked)
    assert str(refused.value) == (
        f"model={locked.__qualname__} cannot be pickled to send to its tasks (TypeError: cannot pickle "
        "'_thread.lock' object); define it and what it uses in a module they can import (a file on PYTHONPATH) "
        "and pass that"
    )


def test_a_name_sent_by_value_means_nothing_to_the_cli(tmp_path):
    """`<run>:model` in a --config file that repeats a run the API sent a model to: the CLI holds no such object."""
    proc = dali_launch("train", "--model", "<run>:model", "--run-root", str(tmp_path / "runs"), timeout=120)
    assert proc.returncode == 2 and proc.stderr == (
        "dali-launch: error: --model <run>:model names an object the Python API sent by value, which only its own "
        "run directory holds (objects/model.pkl); give --model as a built-in name or package.module:attribute\n"
    )
    assert not (tmp_path / "runs").exists()


def test_a_task_whose_headline_its_summary_lacks_is_refused_before_anything_is_written(tmp_path):
    """The pre-flight the CLI takes: the task's summary called on sums of its evaluation's shapes, its headline
    looked up in what that returns; a task given as an object, sent by value, is named as it was given."""
    root = tmp_path / "runs"
    task = dataclasses.replace(classification(num_classes=10), headline="acuracy")
    with pytest.raises(UsageError) as refused:
        Executor("here", run_root=root).submit(task=task)
    assert str(refused.value) == (
        "task=Task object: its headline 'acuracy' is not a value its summary gives (accuracy); name one of them"
    )
    assert not root.exists()
