"""DALI's own pipeline functions, accepted as DALI's JAX tutorials write them:

    @data_iterator(output_map=["images", "labels"], reader_name="mnist_caffe2_reader", sharding=sharding)
    def mnist_sharded_iterator(data_path, is_training, num_shards, shard_id): ...

    dali-launch train --pipeline mypkg.pipe:mnist_sharded_iterator

A `--pipeline` target decorated with `nvidia.dali.pipeline_def` or `nvidia.dali.plugin.jax.data_iterator`, or a
plain function whose parameters include `shard_id` and `num_shards`, becomes the contract's `function(args)`
(contract.py) here, so everything downstream (dali.build, graph_check, the launcher's pre-flight,
--record-samples, checkpoints) sees a contract function:
- the graph function itself (the decorator's `__wrapped__`) is called inside the run's pipeline: what the
  decorators fix (batch_size, num_threads, device_id; sharding, devices) is the run's to decide;
- its parameters are filled by RULE, by their names, and by --pipeline-params NAME=ROLE (or NAME=VALUE); one
  with a default that neither names keeps it;
- its one reader reads this device's global shard, which the function passes it from its shard_id and
  num_shards; the masks also need that shard padded to whole batches, which DALI's tutorials leave unset, so
  PADDING is added to the reader before the pipeline is built (dali.epoch_size checks the built one);
- data_iterator's `output_map` must be the task's outputs, in order.
It imports neither JAX nor DALI: the pipelines' loader (registry.py), which the launcher imports at its start, uses it.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

from dali_launch.trainer.data import dali_graph
from dali_launch.trainer.errors import UsageError

# The rule: a parameter of one of these names gets its role's value, the contract.PipelineArgs field so named.
ROLES = {
    "path": ("data_path", "path", "data_dir", "file_root"),  # the split's folder
    "training": ("is_training", "training", "random_shuffle", "shuffle"),  # False: evaluation
    "shard_id": ("shard_id",),  # this reader's shard of the job's (global: every device's readers)
    "num_shards": ("num_shards",),
    "num_classes": ("num_classes",),
    "image_size": ("image_size",),
    "seed": ("seed",),
}
RULE = {name: role for role, names in ROLES.items() for name in names}
SHARDS = ("shard_id", "num_shards")
PADDING = ("pad_last_batch", "stick_to_shard")  # what the masks need of the reader beside its shard
VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)  # *args, **kwargs: never required
_PAIRS = re.compile(r",\s*(?=[A-Za-z_]\w*\s*=)")  # a comma before NAME=: a value may hold commas, (1, 2)


@dataclass(frozen=True)
class Native:
    """A DALI-style pipeline function as the contract's `function(args)`."""

    function: Callable  # the graph function itself (a decorator's __wrapped__)
    name: str  # its --pipeline value, as messages say it
    output_map: tuple[str, ...] = ()  # data_iterator's names of its outputs, in order; () where none are named

    def __call__(self, args):
        filling = _filling(self, parsed(args.pipeline_params))
        values = {name: getattr(args, what) if how == "role" else what for name, (how, what) in filling.items()}
        outputs = self.function(**values)
        pad_reader(outputs, args, self.name)
        return outputs


def adapted(value, name: str):
    """`value`, the --pipeline target `name` stands for, as the contract's function(args): a Native for a
    DALI-style function, else `value` as it is."""
    found = _graph_function(value)
    if found is None:
        return value
    function, output_map = found
    return Native(function, name, output_map)


def _graph_function(value) -> tuple[Callable, tuple[str, ...]] | None:
    """(the graph function, its output_map) of a DALI-style function, or None for anything else."""
    found = dali_graph.decorated(value)
    if found is not None:
        return found
    if inspect.isfunction(value) and _takes_shards(inspect.signature(value)):
        return value, ()
    return None


def _takes_shards(signature: inspect.Signature) -> bool:
    """A plain function taking shard_id and num_shards, and not the contract's function(args): it cannot be
    called with one argument, or that argument would be a shard id."""
    if not set(SHARDS) <= set(signature.parameters):
        return False
    try:
        bound = signature.bind(None)
    except TypeError:
        return True
    return bool(set(SHARDS) & set(bound.arguments))


def parsed(text: str) -> dict[str, str]:
    """--pipeline-params as {NAME: ROLE or a value's text}; one line for a pair not written NAME=..., or a NAME
    given twice."""
    found: dict[str, str] = {}
    for pair in _PAIRS.split(text.strip()) if text.strip() else []:
        name, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not name.isidentifier() or not value:
            raise UsageError(
                f"--pipeline-params {text}: {pair.strip()!r} is not NAME=ROLE; write NAME=ROLE,... with ROLE one of "
                f"{', '.join(ROLES)}, or NAME=VALUE"
            )
        if name in found:
            raise UsageError(f"--pipeline-params {text} names {name} twice; give each parameter once")
        found[name] = value
    return found


def literal(text: str):
    """A --pipeline-params value that names no role: a Python literal (3, 0.5, True, 'x', (1, 2)), else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def check(function, params: str, outputs: tuple[str, ...], name: str) -> None:
    """Before any pipeline is built (the launcher's pre-flight, the task's build): --pipeline-params written as it
    must be, and given to a DALI-style function only; such a function's parameters all filled, its shard ids
    among them, and its output_map the task's `outputs`. `function`: what registry.load gave for `name`."""
    given = parsed(params)
    if not isinstance(function, Native):
        if given:
            raise UsageError(
                f"--pipeline-params fills the parameters of DALI's own pipeline functions, and --pipeline {name} "
                f"is called as function(args); leave --pipeline-params out"
            )
        return
    roles = {what for how, what in _filling(function, given).values() if how == "role"}
    missing = [role for role in SHARDS if role not in roles]
    if missing:
        raise UsageError(
            f"--pipeline {name} takes no {' and no '.join(missing)}, so its reader would read every sample on every "
            f"device; give it shard_id and num_shards parameters and pass them to its reader (or name its own with "
            f"--pipeline-params NAME=shard_id,NAME=num_shards)"
        )
    if function.output_map and function.output_map != tuple(outputs):
        raise UsageError(
            f"--pipeline {name}: its output_map {list(function.output_map)} is not the outputs the run's task takes, "
            f"in order; use output_map={list(outputs)}"
        )


def _filling(native: Native, given: dict[str, str]) -> dict[str, tuple[str, object]]:
    """How the call fills each parameter it gives: ("role", ROLE) or ("value", VALUE), by parameter name; a
    parameter that neither the rule nor --pipeline-params (`given`) names keeps its default, and is refused
    where it has none."""
    parameters = inspect.signature(native.function).parameters
    unknown = [key for key in given if key not in parameters]
    if unknown:
        raise UsageError(
            f"--pipeline-params {unknown[0]}=...: --pipeline {native.name} has no parameter {unknown[0]}; "
            f"its parameters are {', '.join(parameters) or 'none'}"
        )
    filling: dict[str, tuple[str, object]] = {}
    for key, parameter in parameters.items():
        text = given.get(key)
        if text is not None:
            filling[key] = ("role", text) if text in ROLES else ("value", literal(text))
        elif key in RULE:
            filling[key] = ("role", RULE[key])
        elif parameter.default is parameter.empty and parameter.kind not in VARIADIC:
            raise UsageError(
                f"--pipeline {native.name}: no rule fills its parameter {key}, which has no default; name it with "
                f"--pipeline-params {key}=ROLE (ROLE one of {', '.join(ROLES)}) or {key}=VALUE"
            )
    return filling


def pad_reader(outputs, args, name: str) -> None:
    """The function's one reader, reading this device's shard (`args`', contract.PipelineArgs), padded to whole
    batches: PADDING added where the function left it unset, refused where it gave it otherwise. Outputs that are
    no DataNodes are left to graph_check.outputs_checked's message."""
    listed = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    nodes = [node for node in listed if hasattr(node, "source")]
    if not nodes:
        return
    readers = dali_graph.readers(nodes)
    if len(readers) != 1:
        raise UsageError(
            f"--pipeline {name} has {len(readers)} readers; the run shards exactly one (an fn.readers.* reader "
            f"given shard_id and num_shards)"
        )
    reader = readers[0]
    given = dali_graph.given(reader)
    if (given.get("shard_id"), given.get("num_shards")) != (args.shard_id, args.num_shards):
        raise UsageError(
            f"--pipeline {name}: its reader is not given the function's shard_id and num_shards, so it would read "
            f"every sample on every device; pass shard_id=shard_id, num_shards=num_shards to it"
        )
    for key in PADDING:
        if key not in given:
            dali_graph.add_argument(reader, key, True)
        elif not given[key]:
            raise UsageError(
                f"--pipeline {name}: its reader is given {key}={given[key]!r}, but each sample once an epoch needs its "
                f"shard padded to whole batches; leave {key} out (the run sets it) or pass {key}=True"
            )
