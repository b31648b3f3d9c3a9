"""A pipeline of one's own tried on the CPU before anything is written: defined for each split, and run once for
one sample where its graph runs on the CPU. What its graph shows of the contract -- its outputs (one DataNode for
each of its task's outputs, in order), under the shard order its one reader and that reader's sharding
(args.reader_args()'s), under the global order its reading through args.read alone -- is refused here, in the
launcher's preparation, as the task refuses it after the run directory is written; so is what `args.read`
refuses while the graph is defined (a bad sample under --bad-samples stop), and the function's own failure, as
it defines the graph or as the graph runs (an operator DALI does not have, arguments an operator refuses,
shapes that do not join): one line naming where. A graph on the GPU (outputs placed there by the function
itself) is defined, not run: the task runs it. What only its whole data shows (its labels' values) stays the
task's.
"""

from __future__ import annotations

import dataclasses
import re

from dali_launch.trainer.data import dali_graph, native
from dali_launch.trainer.data.contract import OUTPUTS
from dali_launch.trainer.errors import UsageError, own_line, said, where

# What args.reader_args() gives a reader that the masks rely on: its shard, padded to whole batches.
SHARDING = ("shard_id", "num_shards", "pad_last_batch", "stick_to_shard")
FIX = "fix the pipeline function"


def outputs_checked(outputs, name: str, names: tuple[str, ...] = OUTPUTS) -> tuple:
    """The pipeline function's outputs, one DataNode for each of `names` (its task's, in order); `name` is its
    --pipeline (the task's check too)."""
    wrong = _wrong_outputs(outputs, names)
    if wrong:
        count = {1: "one DataNode", 2: "two DataNodes", 3: "three DataNodes"}.get(len(names), f"{len(names)} DataNodes")
        raise UsageError(f"--pipeline {name} returned {wrong}; return {count}: {', '.join(names)}")
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def _wrong_outputs(outputs, names: tuple[str, ...]) -> str:
    """What a pipeline function returned instead of one DataNode for each of `names`, in words; "" when it did."""
    from nvidia.dali.data_node import DataNode  # loaded already: the function was called inside a pipeline

    if outputs is None:
        return "None"
    if isinstance(outputs, DataNode):
        return "" if len(names) == 1 else "one DataNode"
    if not isinstance(outputs, (tuple, list)):
        return _a(outputs)
    if len(outputs) != len(names):
        return f"{len(outputs)} output{'' if len(outputs) == 1 else 's'}"
    for output, what in zip(outputs, names):
        if not isinstance(output, DataNode):  # DALI would make a constant of it, outside the pipeline
            return f"{_a(output)} as its {what}"
    return ""


def _a(value) -> str:
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def readers_checked(count: int, name: str) -> None:
    """The shard order's masks assume one reader a pipeline, sharded by args.reader_args() (the task's check too)."""
    if count != 1:
        raise UsageError(f"--pipeline {name} has {count} readers; use exactly one, given **args.reader_args()")


def sharding_checked(given: dict, expected: dict, name: str) -> None:
    """The reader's SHARDING arguments (`given`, by those names) against args.reader_args()'s (`expected`): this
    device's shard, padded to whole batches, is what the masks assume (the task's check too, on the built reader)."""
    wrong = [key for key in SHARDING if given.get(key) != expected[key]]
    if wrong:
        raise UsageError(
            f"--pipeline {name}: its reader does not read its shard padded to whole batches (its {', '.join(wrong)} "
            f"differ from args.reader_args()'s); pass **args.reader_args() to it"
        )


def read_checked(others: int, read: bool, name: str) -> None:
    """--sample-order global feeds the pipeline's rows through args.read alone: `others` native readers
    beside it, or no call of it (`read`), and it cannot (the task's check too)."""
    if others or not read:
        raise UsageError(
            f"--pipeline {name} does not read through args.read(...), which --sample-order global needs; "
            f"use args.read, or --sample-order shards"
        )


def check(name: str, args, shard_order: bool, names: tuple[str, ...] = OUTPUTS) -> None:
    """--pipeline `name` (not a built-in one), defined for `args` (contract.PipelineArgs, without a feed, so
    args.read makes a native reader here too): its outputs (one for each of `names`, its task's); under the shard
    order its one reader and how it is sharded; under the global order, that it reads through args.read and
    nothing else. A pipeline written as DALI writes one is checked as native.py adapts it, first."""
    from dali_launch.trainer.data import registry

    native.check(registry.load(name), args.pipeline_params, names, name)
    reads = []
    outputs = outputs_checked(define(name, _watched(args, reads)), name, names)
    readers = [op for op in dali_graph.operators(outputs).values() if _kind(op).startswith(dali_graph.READERS)]
    if not shard_order:
        read_checked(len(readers) - len(reads), bool(reads), name)
        return
    readers_checked(len(readers), name)
    given = _sharding(readers[0])
    if given is not None:
        sharding_checked(given, args.reader_args(), name)


def _watched(args, reads: list):
    """`args` whose `read` notes each call in `reads`: a subclass, so that copies the function makes of it
    (dataclasses.replace) note theirs in the same list."""

    class Watched(type(args)):
        def read(self, reader: str, **kwargs):
            reads.append(reader)
            return super().read(reader, **kwargs)

    return Watched(**{f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init})


def define(name: str, args, pipe=None):
    """What the pipeline function returns inside a DALI pipeline on the CPU (`pipe`, else one of its own; None
    too). Defining needs no device and no data, so its failure is the function's: one line, where it failed. A
    UsageError is ours (args.read's screen): the task would raise it, later."""
    from nvidia.dali.pipeline import Pipeline

    from dali_launch.trainer.data import registry

    function = registry.load(name)
    try:
        with pipe or Pipeline(batch_size=1, num_threads=1, device_id=None):
            return function(args)
    except UsageError:
        raise
    except Exception as e:  # the user's code, as the task would call it
        at = where(e)
        raise UsageError(
            f"--pipeline {name} failed defining its graph ({f'{at}: ' if at else ''}{said(e)}); {FIX}"
        ) from None


def operators(outputs) -> dict[int, str]:
    """The schema name of every operator behind `outputs` (DataNodes), by the operator's id."""
    return {key: _kind(op) for key, op in dali_graph.operators(outputs).items()}


_kind = dali_graph.kind


def _sharding(op) -> dict | None:
    """A reader operator's SHARDING arguments: as given to it, else its schema's defaults (shard 0 of 1, no
    padding). None where this DALI keeps them elsewhere: the task's check on the built reader remains."""
    return dali_graph.arguments(op, SHARDING)


def sample(name: str, args, names: tuple[str, ...]) -> dict | None:
    """One sample of each output of --pipeline `name`, its graph run once on the CPU for `args`: {output: (shape,
    dtype)}, what the task is checked against (step/dry_run.py); None for a graph the function placed on the GPU
    (the task runs it: a launcher keeps off the GPUs its tasks use); where DALI's outputs are GPU ones anyway, one
    sample of each is copied to the host. A graph that fails to build or run is one
    line naming the operator and where the function made it."""
    from nvidia.dali.pipeline import Pipeline

    from dali_launch.trainer.data import dali_outputs

    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None, seed=0)
    outputs = outputs_checked(define(name, args, pipe), name, names)
    if any(node.device != "cpu" for node in outputs):
        return None
    with pipe:
        pipe.set_outputs(*outputs)
    try:
        pipe.build()
        arrays = [dali_outputs.host_array(output) for output in pipe.run()]
    except UsageError:
        raise
    except Exception as e:  # DALI's own error: the operator, the user's line that made it, what it met
        raise UsageError(
            f"--pipeline {name} failed running one batch on the CPU ({dali_said(e)}); {FIX}, or the data it reads"
        ) from None
    return {output: (tuple(a.shape[1:]), a.dtype.name) for output, a in zip(names, arrays)}


def dali_said(e: Exception) -> str:
    """DALI's error in one line: `fn.cat at own.py line 12: what it met`, from its text (the operator, the
    definition's traceback, what it encountered); the first line where the text is not DALI's."""
    text = str(e)
    operator = re.search(r"Error in \w+ operator `(?:nvidia\.dali\.)?([^`]+)`", text)
    made = re.findall(r'File "([^"]+)", line (\d+)', text.split("encountered:", 1)[0])
    met = text.split("encountered:", 1)[1].strip().splitlines() if "encountered:" in text else []
    if not (operator and met):
        return said(e)
    at = own_line([(name, int(line)) for name, line in made])
    at = f" at {at}" if at else ""
    return f"{operator.group(1)}{at}: {re.sub(r'^Assert on .* failed: ', '', met[0])[:300]}"
