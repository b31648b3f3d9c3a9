"""--init-from PATH: fine-tuning starts from another checkpoint's parameters and BatchNorm statistics.

PATH is a run directory of ours (its newest complete checkpoint: resilience/saved.py), one of its
checkpoints/STEP folders, or an Orbax checkpoint folder of one's own (a tree with `params` and
optionally `batch_stats`, as Flax's variables; or the parameters alone). Only those are read: never
the optimizer's state, the step, the EMA or the data position, so the run starts its schedule and
its epochs afresh. Each of the model's variables is

    loaded          the checkpoint has it, with the same shape
    re-initialised  a head of another --num-classes (only the last axis differs, and it is --num-classes
                    wide here), or a variable the checkpoint lacks (e.g. a class token for --vit-pool cls)
    refused         any other shape: one line naming the first such variable and both shapes, exit 2

and the checkpoint's variables the model lacks are ignored. The start-up line counts each kind and
names the re-initialised and ignored ones; RUN/init_from.json lists all three.

The launcher runs the same comparison before anything is written (`python -m` this module, on CPU, in
a child: the launcher's process must not import JAX, it may become the task's), where it knows the
pipeline's sample shape (the built-in pipelines); the task always runs it again on the real one.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths, parse_json, write_atomic

METADATA = "_METADATA"  # Orbax's JSON tree metadata of a checkpoint folder (names only; shapes are in its store)
SHOWN = 6  # names the start-up line gives of each kind
NOT_VARIABLES = {"opt_state", "ema", "accum", "rng", "slot", "step", "tally"}  # our TrainState's others


@dataclass(frozen=True)
class Source:
    tree: Path  # the Orbax folder holding the tree
    label: str  # what the start-up line calls it


def locate(path: str) -> Source:
    """The checkpoint tree PATH stands for (no JAX: the launcher's check)."""
    root = Path(path)
    if (root / "config.json").is_file():  # a run directory
        newest = saved.newest(RunPaths(root))
        if newest is None:
            raise UsageError(
                f"--init-from {path}: the run has no complete checkpoint yet; wait for its first, or give one "
                f"of its checkpoints/STEP folders"
            )
        return Source(newest.path / "state", f"{path} (its checkpoint {newest.step})")
    for tree in (root / "state", root):
        if (tree / METADATA).is_file():
            return Source(tree, path)
    raise UsageError(
        f"--init-from {path}: no checkpoint there; give a run directory, one of its checkpoints/STEP folders, or an "
        f"Orbax checkpoint folder (with {METADATA})"
    )


def variable_path(key: tuple[str, ...], has_params: bool) -> str | None:
    """A checkpoint leaf's key as a model variable's path ("params/head/kernel", "batch_stats/..."),
    None for what is not a variable (optimizer state, EMA, ...)."""
    if not has_params:
        return "/".join(("params", *key))
    if key[0] == "collections":
        return "/".join(key[1:]) if len(key) > 1 else None
    return None if key[0] in NOT_VARIABLES else "/".join(key)


def tree_keys(tree: Path) -> list[tuple[str, ...]]:
    """Every leaf's key in the checkpoint, from its JSON metadata (no JAX)."""
    record, why = parse_json(tree / METADATA)
    metadata = (record or {}).get("tree_metadata")
    if not isinstance(metadata, dict):
        raise UsageError(
            f"--init-from: {tree / METADATA} is {f'damaged ({why})' if why else 'missing or damaged'}; give "
            f"another checkpoint of that run (its checkpoints/STEP) or another run"
        )
    return [tuple(ast.literal_eval(key)) for key in metadata]


@dataclass
class Plan:
    loaded: list[str] = field(default_factory=list)
    reinitialised: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def describe(self, source: Source) -> str:
        """The start-up line: counts, and the first few names of what was not loaded (all: init_from.json)."""
        names = lambda paths: (
            ", ".join(paths[:SHOWN]) + (f", ... {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")
        )
        return (
            f"init from {source.label}: loaded {len(self.loaded)} variables; re-initialised "
            f"{len(self.reinitialised)} ({names(self.reinitialised) or 'none'}); ignored {len(self.ignored)} "
            f"({names(self.ignored) or 'none'})"
        )


def plan(fresh: dict[str, tuple], found: dict[str, tuple], num_classes: int, source: str, model: str) -> Plan:
    """What to do with each variable (paths -> shapes, the model's and the checkpoint's); raises on the first
    shape no head explains."""
    out = Plan(ignored=sorted(set(found) - set(fresh)))
    for path in sorted(fresh):
        mine, theirs = tuple(fresh[path]), tuple(found.get(path, ()))
        if path not in found:
            out.reinitialised.append(path)
        elif mine == theirs:
            out.loaded.append(path)
        elif len(mine) == len(theirs) and mine[:-1] == theirs[:-1] and mine[-1] == num_classes:
            out.reinitialised.append(path)  # a head of another class count
        else:
            raise UsageError(
                f"--init-from {source}: {path} is {theirs} there but {mine} in --model {model}; start from a checkpoint "
                f"of the same model (only a head of another --num-classes is re-initialised)"
            )
    if not out.loaded:
        raise UsageError(
            f"--init-from {source} shares no variable with --model {model} (it has {', '.join(sorted(found)[:3])}, ...); "
            f"start from a checkpoint of the same model"
        )
    return out


def found_shapes(tree: Path) -> dict[str, tuple]:
    """The checkpoint's variables' shapes, read through Orbax (imports JAX)."""
    import jax
    import orbax.checkpoint as ocp

    with _quiet_orbax():
        metadata = ocp.PyTreeCheckpointer().metadata(tree)
    flat = jax.tree_util.tree_flatten_with_path(dict(getattr(metadata, "item_metadata", metadata)))[0]
    keys = [tuple(str(getattr(k, "key", getattr(k, "idx", k))) for k in path) for path, _ in flat]
    has_params = any(key[0] == "params" for key in keys)
    shapes = {variable_path(key, has_params): tuple(leaf.shape) for key, (_, leaf) in zip(keys, flat)}
    return {path: shape for path, shape in shapes.items() if path is not None}


def load(tree: Path, paths: list[str]) -> dict:
    """The checkpoint's values of these variables (numpy), by path; only they are read."""
    import numpy as np
    import orbax.checkpoint as ocp

    has_params = any(key[0] == "params" for key in tree_keys(tree))
    wanted = {k: variable_path(k, has_params) for k in tree_keys(tree)}
    template, args = {}, {}
    for key, path in wanted.items():
        if path in paths:
            node, arg = template, args
            for part in key[:-1]:
                node, arg = node.setdefault(part, {}), arg.setdefault(part, {})
            node[key[-1]], arg[key[-1]] = 0, ocp.RestoreArgs(restore_type=np.ndarray)
    restore = ocp.args.PyTreeRestore(item=template, restore_args=args, partial_restore=True)
    with _quiet_orbax():
        restored = ocp.PyTreeCheckpointer().restore(tree, args=restore)
    values = {}
    for key, path in wanted.items():
        if path in paths:
            node = restored
            for part in key:
                node = node[part]
            values[path] = node
    return values


@contextlib.contextmanager
def _quiet_orbax():
    """Orbax warns that a tree folder inside a checkpoint (STEP/state) has no step metadata of its own:
    true of every checkpoint of ours, and nothing to act on."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def flat_variables(variables: dict) -> dict:
    """{"params": {...}, "batch_stats": {...}} as paths -> arrays."""
    from flax.traverse_util import flatten_dict

    return {"/".join(k): v for k, v in flatten_dict(variables).items()}


def check(spec, sample_shape: tuple[int, ...], source: Source) -> Plan:
    """The model's variables (shapes only, no computation) against the checkpoint's."""
    import jax
    import jax.numpy as jnp

    from dali_launch.trainer.model.registry import run_model

    model = run_model(spec)
    init = lambda x: model.init({"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}, x)
    variables = jax.eval_shape(init, jax.ShapeDtypeStruct((1, *sample_shape), jnp.float32))
    fresh = {path: leaf.shape for path, leaf in flat_variables(dict(variables)).items()}
    return plan(fresh, found_shapes(source.tree), spec.data.num_classes, spec.model.init_from, spec.model.model)


def apply(spec, state, say, record: Path | None = None):
    """`state` (a fresh host TrainState) with the checkpoint's variables where the plan loads them; its
    optimizer state and EMA made anew from them. Says the plan, and writes it to `record` if given."""
    import numpy as np
    from flax.traverse_util import unflatten_dict

    source = locate(spec.model.init_from)
    fresh = flat_variables(state.variables())
    found = plan({p: np.shape(v) for p, v in fresh.items()}, found_shapes(source.tree), spec.data.num_classes,
                 spec.model.init_from, spec.model.model)  # fmt: skip
    values = {p: np.asarray(v, np.asarray(fresh[p]).dtype) for p, v in load(source.tree, found.loaded).items()}
    variables = unflatten_dict({tuple(p.split("/")): v for p, v in {**fresh, **values}.items()})
    params, collections = variables.pop("params"), variables
    state = state.replace(
        params=params,
        collections=collections,
        opt_state=state.tx.init(params),
        ema={"params": params, **collections} if state.ema else {},
    )
    say(found.describe(source))
    if record is not None:
        write_atomic(record, as_json(found, source))
    return state


def main() -> int:
    """The launcher's check in a child (on CPU): stdin holds the spec's JSON and the sample shape."""
    from dali_launch.trainer.config import TaskSpec

    request = json.loads(sys.stdin.read())
    spec = TaskSpec.from_json(request["spec"])
    try:
        check(spec, tuple(request["sample_shape"]), locate(spec.model.init_from))
    except UsageError as e:
        print(f"init-from: {e}", file=sys.stderr)  # launcher/route/init_check.py reads this line
        return 2
    return 0


def as_json(plan_: Plan, source: Source) -> str:
    return json.dumps({"source": str(source.tree), **asdict(plan_)}, indent=2)


if __name__ == "__main__":
    sys.exit(main())
