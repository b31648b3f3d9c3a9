"""A pipeline of one's own, defined (not built, not run) on the CPU before anything is written: what its
graph shows of the contract. Its outputs (two DataNodes: images, labels) and its readers (one, under the
shard order) are refused here, in the launcher's preparation, as they were by the task after the run
directory was written; what only its data shows (its labels' values and width) stays the task's. A graph
that cannot be defined here (it needs its data, a GPU) is passed: the task reports its own error.
"""

from __future__ import annotations

from dali_launch.trainer.errors import UsageError


def outputs_checked(outputs, name: str) -> tuple:
    """The pipeline function's outputs as (images, labels); `name` is its --pipeline (the task's check too)."""
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 2:
        raise UsageError(f"--pipeline {name} returned {type(outputs).__name__}; return two DataNodes: images, labels")
    return tuple(outputs)


def readers_checked(count: int, name: str) -> None:
    """The shard order's masks assume one reader a pipeline, sharded by args.reader_args() (the task's check too)."""
    if count != 1:
        raise UsageError(f"--pipeline {name} has {count} readers; use exactly one, given **args.reader_args()")


def check(name: str, args, shard_order: bool) -> None:
    """--pipeline `name` (not a built-in one), defined for `args` (contract.PipelineArgs): its outputs, and
    under the shard order no more than one reader (none: args.read may read otherwise; the task counts)."""
    defined = define(name, args)
    if defined is None:
        return
    outputs = outputs_checked(defined, name)
    readers = [kind for kind in operators(outputs).values() if kind.startswith("readers__")]
    if shard_order and len(readers) > 1:
        readers_checked(len(readers), name)


def define(name: str, args):
    """What the pipeline function returns inside a DALI pipeline on the CPU, or None if it cannot be defined."""
    from nvidia.dali.pipeline import Pipeline

    from dali_launch.trainer import entry_points

    function = entry_points.load("pipeline", name)
    try:
        with Pipeline(batch_size=1, num_threads=1, device_id=None):
            return function(args)
    except Exception:  # a graph of the user's we cannot look into is not refused here
        return None


def operators(outputs) -> dict[int, str]:
    """The schema name of every operator behind `outputs` (DataNodes), by the operator's id: each node's
    `source` operator and, through its inputs (argument inputs included), theirs."""
    todo, kinds = list(outputs), {}
    while todo:
        op = getattr(todo.pop(), "source", None)
        if op is None or id(op) in kinds:
            continue
        kinds[id(op)] = getattr(op._op, "schema_name", type(op._op).__name__)  # DALI's operator object
        todo.extend(op.inputs)
    return kinds
