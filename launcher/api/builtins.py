"""The built-in models, tasks and pipelines by name, as `dali_launch.models`, `.tasks` and `.pipelines`.

    import dali_launch as dl

    list(dl.models)                              # ['mlp', 'cnn', ...]: the names --model takes, nothing imported
    executor.submit(model=dl.models["resnet18"], task=dl.tasks["classification"])

Each is a read-only mapping, name -> the object the name stands for, rather than a function per kind: it lists
what there is (`list`, `in`, `items`) as the CLI's flags name it, and its values are what `submit` takes, recorded
by their built-in names (`--model resnet18`). The names come from the registries without importing anything; a
value is imported when it is looked up (a model's module imports Flax, a pipeline's DALI), by the kind's own
loader (trainer/entries.py), so a name looked up here is the one a task loads.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping

from dali_launch.trainer import entries


class NotBuiltin(KeyError):
    """A name no built-in of the kind has; its message names the kind's names and the nearest one."""

    def __str__(self) -> str:
        return str(self.args[0])


class Builtins(Mapping):
    """The built-ins of one kind (model, task or pipeline) by name, each imported when looked up."""

    def __init__(self, kind: str):
        self.kind = kind

    def _names(self) -> dict[str, str]:
        return entries.builtin(self.kind)

    def __getitem__(self, name: str):
        if name not in self._names():
            close = difflib.get_close_matches(str(name), list(self._names()), n=1, cutoff=0.6)
            guess = f"did you mean {close[0]!r}? " if close else ""
            raise NotBuiltin(
                f"no built-in {self.kind} {name!r}; {guess}the built-in {self.kind}s are {', '.join(self._names())}"
            )
        return entries.load(self.kind, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return f"<the built-in {self.kind}s: {', '.join(self._names())}>"


models = Builtins("model")
tasks = Builtins("task")
pipelines = Builtins("pipeline")
