"""A DALI graph as it was defined, read from its outputs: the operator instances behind them, what kind each is,
what a reader was given, and an argument added to a reader before the pipeline is built. graph_check.py (the
contract's checks) and native.py (DALI's own pipeline functions) read graphs through it. It imports no DALI: the
DataNodes carry everything, through DALI's own attributes (`source`, `_op`, `_init_args`, `_spec`, DALI 2.4).
"""

from __future__ import annotations


def instances(outputs) -> dict:
    """DALI's operator instance behind every node of `outputs` (DataNodes), by its id: each node's `source` and,
    through its inputs (argument inputs included), theirs."""
    todo, found = list(outputs), {}
    while todo:
        instance = getattr(todo.pop(), "source", None)
        if instance is None or id(instance) in found:
            continue
        found[id(instance)] = instance
        todo.extend(instance.inputs)
    return found


def kind(op) -> str:
    """An operator's schema name (readers__Caffe2, decoders__Image, ...)."""
    return getattr(op, "schema_name", type(op).__name__)


READERS = ("readers__", "experimental__readers__")  # schema names of readers: fn.readers.*, fn.experimental.readers.*


def readers(outputs) -> list:
    """The reader instances (fn.readers.*, fn.experimental.readers.* such as the video reader) behind `outputs`."""
    return [i for i in instances(outputs).values() if kind(i._op).startswith(READERS)]


def given(reader) -> dict:
    """The arguments a reader instance was given in Python, by name (fn.* keeps a call's in its operator)."""
    return reader._op._init_args


def add_argument(reader, name: str, value) -> None:
    """`name=value` given to a reader after the call that made it, before its pipeline is built: in the OpSpec
    DALI builds it from, and among what `given` reports, so that the checks read what DALI will build."""
    reader._spec.AddArg(name, value)
    given(reader)[name] = value
