"""A model, pipeline or task the Python API was given as an object (launcher/api/), on its way to the tasks.

One its tasks can import (`module:qualname` resolves to it) is recorded as that string, as the CLI's flag would
be; any other (defined in a notebook, in __main__, inside a function; an instance) is sent by value: pickled with
cloudpickle, named `<run>:KIND` (trainer/entry_points.py's SUBMISSION holds it for the checks) and written into the run
directory's objects/ with the run's other files (directory.create), once every check has passed. The last check
(`check`, in prepare.py) has a fresh interpreter with the tasks' environment (this process's working directory
and environment: PYTHONPATH) load each as a task will; what it cannot load is one UsageError naming the object,
what it refers to and the fix, and nothing is written. SLURM's nodes are taken to see what this machine sees.
What was sent is this process's, for one submission at a time (a notebook's, a script's: all the runs of one call).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass, field

from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer import entry_points
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, write_atomic

KINDS = ("model", "pipeline", "task")
LOAD_TIMEOUT_S = 300  # unpickling a Flax model imports JAX: seconds, more on a loaded machine
MARK = "sent-object: "  # the loader's verdict lines, told apart from what the user's modules print
# What a fresh interpreter runs on the request (kind, how, what): an object's pickle, or its module:qualname.
LOADER = f"""
import importlib, json, pickle, sys
for kind, how, what in pickle.load(sys.stdin.buffer):
    why = None
    try:
        if how == "value":
            pickle.loads(what)
        else:
            module, _, qualname = what.partition(":")
            value = importlib.import_module(module)
            for part in qualname.split("."):
                value = getattr(value, part)
    except BaseException as e:
        why = [type(e).__name__, str(e).splitlines()[0] if str(e) else "", getattr(e, "name", None)]
    print({MARK!r} + json.dumps([kind, why]), flush=True)
"""


@dataclass(frozen=True)
class Sent:
    """An object the API was given: its kind (model, pipeline, task), what it is called in messages, how the
    run's settings name it, and its pickle where it goes by value."""

    kind: str
    label: str
    reference: str
    pickled: bytes | None = None
    value: object = field(default=None, compare=False)  # the object itself, where it goes by value


_sent: dict[str, Sent] = {}  # reference -> what this process sent under it, for the submission under way


def forget() -> None:
    """A new submission: what an earlier one sent is not its own."""
    _sent.clear()
    entry_points.SUBMISSION.forget()


def in_callers_words(message: str) -> str:
    """A check's message, an object sent by value named as the caller gave it (`task=Task object`), not as the
    run records it (`--task <run>:task`)."""
    for sent in _sent.values():
        if sent.pickled is not None:
            message = message.replace(f"--{sent.kind} {sent.reference}", f"{sent.kind}={sent.label}")
    return message


def by_reference(kind: str, label: str, reference: str) -> str:
    """An object its tasks import as `reference` (module:qualname): recorded as that, checked like the others."""
    _sent[reference] = Sent(kind, label, reference)
    return reference


def by_value(kind: str, value, label: str) -> str:
    """An object its tasks cannot import: pickled now (what cannot be is one line), held for the checks. The runs
    of one call (submit_array) send one object of a kind by value: each run directory's objects/KIND.pkl."""
    import cloudpickle

    earlier = next((s for s in _sent.values() if s.kind == kind and s.pickled is not None), None)
    if earlier is not None:
        if earlier.value is value:
            return earlier.reference
        raise UsageError(
            f"{kind}={label}: the runs of one call send one {kind} by value, and {kind}={earlier.label} is sent "
            f"already; give them the same {kind}, or define each in a module their tasks can import and pass those"
        )
    try:
        pickled = cloudpickle.dumps(value)
    except Exception as e:
        raise UsageError(
            f"{kind}={label} cannot be pickled to send to its tasks ({type(e).__name__}: {_first_line(e)}); define "
            f"it and what it uses in a module they can import (a file on PYTHONPATH) and pass that"
        ) from None
    reference = entry_points.SUBMISSION.hold(kind, value)
    _sent[reference] = Sent(kind, label, reference, pickled, value)
    return reference


def of(run: RunConfig) -> list[Sent]:
    """What this process sent that `run` names."""
    named = (run.model.model, run.data.pipeline, run.task.task)
    return [_sent[reference] for reference in named if reference in _sent]


def check(run: RunConfig) -> None:
    """Each object `run` was sent loaded as a task will load it, by a fresh interpreter with the tasks'
    environment; the first that does not load is one UsageError."""
    sent = of(run)
    if not sent:
        return
    request = [(s.kind, "value", s.pickled) if s.pickled else (s.kind, "reference", s.reference) for s in sent]
    verdicts = _load_fresh(request)
    for s in sent:
        if s.kind not in verdicts:
            raise UsageError(f"{s.kind}={s.label}: a fresh interpreter with the tasks' environment died loading it")
        if verdicts[s.kind]:
            raise UsageError(_refusal(s, *verdicts[s.kind]))


def write(run: RunConfig, paths: RunPaths) -> None:
    """The pickles `run` names, into its new run directory (directory.create, which removes it all on failure)."""
    for s in of(run):
        if s.pickled is not None:
            write_atomic(paths.sent(s.kind), s.pickled)


def _load_fresh(request: list[tuple]) -> dict[str, list | None]:
    """kind -> None (it loaded) or [exception type, message, missing module] from a fresh interpreter, run where
    the tasks run (this working directory, this environment: `-c` puts the working directory on sys.path, as
    the tasks' `python -m` does)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", LOADER],
            input=pickle.dumps(request),
            capture_output=True,
            timeout=LOAD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        kinds = ", ".join(kind for kind, _, _ in request)
        raise UsageError(
            f"loading {kinds} in a fresh interpreter took over {LOAD_TIMEOUT_S} s; make importing them quicker"
        ) from None
    lines = proc.stdout.decode(errors="replace").splitlines()
    return dict(json.loads(line[len(MARK) :]) for line in lines if line.startswith(MARK))


def _refusal(sent: Sent, kind_of_error: str, message: str, missing: str | None) -> str:
    """The one line for an object that did not load: which, what it refers to, the fix."""
    where = f"(working directory {os.getcwd()}, PYTHONPATH {os.environ.get('PYTHONPATH') or 'unset'})"
    how = "sent by value" if sent.pickled else f"imported as {sent.reference}"
    if kind_of_error in ("ModuleNotFoundError", "ImportError") and missing:
        fix = "put its folder on PYTHONPATH or install it"
        if sent.pickled:
            fix += f", or define what {sent.label} uses from it beside {sent.label}"
        return (
            f"{sent.kind}={sent.label} ({how}) refers to module {missing}, which its tasks cannot import {where}; {fix}"
        )
    return (
        f"{sent.kind}={sent.label} ({how}) does not load in a fresh interpreter with its tasks' environment {where}: "
        f"{kind_of_error}: {message}; define it in a module they can import (a file on PYTHONPATH) and pass that"
    )


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
