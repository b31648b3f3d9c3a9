"""DALI's own objects read where DALI has no public way: a graph as it was defined, read from its outputs (the
operators behind them, what kind each is, what a reader was given and its schema's defaults, an argument added
to a reader before the pipeline is built), and a function DALI's decorators made (`@pipeline_def`,
`data_iterator`) taken back to the graph function it wraps. graph_check.py (the contract's checks) and native.py
(DALI's own pipeline functions) read DALI through it, and no other module reads DALI's private attributes.

It imports no DALI: the objects carry everything. Checked against DALI 2.4.0 (the CPU machines'; the GPU machines
have no DALI), attribute by attribute:

    DataNode.source                 the operator instance that made a node (public, undocumented)
    instance._op                    that instance's operator object: `schema_name`, `device`
    op._init_args                   the arguments a reader was given in Python, by name
    op._schema                      its schema: GetArgumentDefaultValueString, the defaults of what was not given
    instance._spec.AddArg           an argument added to the OpSpec DALI builds the operator from
    wrapper._is_pipeline_def        how pipeline_def marks the function it returns
    data_iterator's closure         `func`, `output_map`, `iterator_type`: the free variables of the function it
                                    returns (functools.wraps keeps the graph function as __wrapped__)

A DALI that moves one breaks here, and tests/test_native.py and tests/test_catalogue_pipelines.py find it.
"""

from __future__ import annotations

import ast
import inspect


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


def operators(outputs) -> dict:
    """DALI's operator object behind every node of `outputs`, by its instance's id."""
    return {key: instance._op for key, instance in instances(outputs).items()}


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


def arguments(op, names: tuple[str, ...]) -> dict | None:
    """Operator `op`'s arguments `names`: as given to it, else its schema's defaults. None where this DALI keeps
    them elsewhere."""
    given_, schema = getattr(op, "_init_args", None), getattr(op, "_schema", None)
    if not isinstance(given_, dict) or schema is None:
        return None
    try:
        return {
            k: given_[k] if k in given_ else ast.literal_eval(schema.GetArgumentDefaultValueString(k)) for k in names
        }
    except (AttributeError, RuntimeError, ValueError, SyntaxError):
        return None


def add_argument(reader, name: str, value) -> None:
    """`name=value` given to a reader after the call that made it, before its pipeline is built: in the OpSpec
    DALI builds it from, and among what `given` reports, so that the checks read what DALI will build."""
    reader._spec.AddArg(name, value)
    given(reader)[name] = value


def decorated(value) -> tuple[object, tuple[str, ...]] | None:
    """(the graph function, data_iterator's output_map or ()) of a function `@pipeline_def` or `data_iterator`
    made; None for anything else."""
    if getattr(value, "_is_pipeline_def", False):
        return value.__wrapped__, ()
    closure = _closure(value)
    if {"func", "output_map", "iterator_type"} <= set(closure):  # data_iterator's create_iterator
        return value.__wrapped__, tuple(closure["output_map"] or ())
    return None


def _closure(value) -> dict:
    """The free variables a decorator's wrapper closes over (data_iterator's: its output_map, reader_name...)."""
    if not inspect.isfunction(value) or not hasattr(value, "__wrapped__"):
        return {}
    try:
        return inspect.getclosurevars(value).nonlocals
    except (TypeError, ValueError):
        return {}
