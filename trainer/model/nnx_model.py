"""Flax NNX models (`flax.nnx.Module`) through the trainer's functional core, which Linen models use.

A factory that takes `rngs` is called as `factory(num_classes=N, rngs=nnx.Rngs(seed))`; when it
returns an `nnx.Module`, `NnxModel` presents it as the trainer calls a Linen module (contract.py,
forward.py): `init_with_output(rngs, x, train=False)` -> (logits, variables) and
`apply(variables, x, rngs=..., mutable=[...], train=...)`. The module is split once (`nnx.split`)
into its graph definition, static (part of the compiled program), and its state as plain nested
dicts: `params` (nnx.Param) and collections named as Linen names them (nnx.BatchStat ->
`batch_stats`). So the step, --parallel, the averaging of statistics, EMA, bf16, accumulation,
checkpoints, resume and checksums treat them as any Linen model's variables. Each call merges them
back (`nnx.merge`): trace-time work, nothing of it runs on the device.

Training and evaluation: the graph is split twice, after NNX's own `module.train()` and
`module.eval()` (Dropout's `deterministic`, BatchNorm's `use_running_average`), and each call takes
the one it needs: a module written from Flax's documentation needs no `train` argument.

Randomness: the module's RNG streams (its nnx.Rngs, a Dropout's own) are not kept. Each call sets
every stream from the trainer's dropout key, which differs per step and device and continues in a
resumed run (the stream a Linen model's `dropout` RNG gets); the i-th stream takes fold_in(key, i),
so two Dropout layers draw different masks.

The structure is found by abstract evaluation (`jax.eval_shape`): the launcher checks a factory
this way without computing a parameter or taking a device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx import variablelib

from dali_launch.trainer.errors import UsageError

# What to use instead of a built-in NNX model that cannot take the pipeline's images: it is not the user's to fix.
INSTEAD = {
    "cnn-nnx": "cnn-nnx takes 28x28 grey images (the mnist pipeline's); use --model cnn, its Linen twin, at any size"
}

CALL = "factory(num_classes=N, rngs=nnx.Rngs(seed))"


@dataclass(frozen=True)
class Part:
    """One group of the module's state: its name (`params`, `batch_stats`, ... or `rng`) and its
    variables, as (path, abstract nnx.Variable) pairs."""

    name: str
    paths: frozenset
    template: tuple = field(compare=False)  # ((path, Variable of ShapeDtypeStructs), ...)

    def owns(self, path, _value) -> bool:  # an nnx filter: exactly this part's variables
        return path in self.paths

    def pure(self, state) -> dict:
        return nnx.to_pure_dict(state)

    def state(self, values: dict):
        """An nnx.State of this part's variables holding `values` (a nested dict as `pure` gives)."""
        return nnx.from_flat_state([(path, variable.replace(_at(values, path))) for path, variable in self.template])


def _at(tree: dict, path: tuple):
    for key in path:
        tree = tree[key]
    return tree


@dataclass(frozen=True, eq=False)
class NnxModel:
    """An nnx.Module as the trainer calls a Linen one (see the module's docstring)."""

    TRAIN_KWARG = "train"  # what forward.train_kwarg finds: the adapter switches NNX's train() / eval()
    name: str  # the --model value, for messages
    factory: Callable
    num_classes: int
    graphs: tuple  # (training, evaluation) nnx.GraphDef
    parts: tuple[Part, ...]  # params, then each collection, then the RNG streams

    def __post_init__(self):
        # The step's state carries this object as static data: hashed at every device call.
        object.__setattr__(self, "_hash", hash((self.factory, self.num_classes, self.graphs, self.parts)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        fields = lambda m: (m.factory, m.num_classes, m.graphs, m.parts)
        return isinstance(other, NnxModel) and fields(self) == fields(other)

    @property
    def collections(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts[1:-1])

    def init_with_output(self, rngs: dict, example, train: bool = False):
        """The module built from rngs["params"] (nnx.Rngs(seed)'s key) and its logits for `example`,
        in evaluation mode as a Linen model is initialised (BatchNorm keeps its initial statistics)."""
        module = self.factory(num_classes=self.num_classes, rngs=nnx.Rngs(rngs["params"]))
        module.train() if train else module.eval()
        try:
            logits = module(example)
        except Exception as e:
            fix = INSTEAD.get(self.name, "make it take the pipeline's images")
            raise UsageError(
                f"--model {self.name} failed on one sample of shape {tuple(example.shape)} "
                f"({type(e).__name__}: {one_line(e)}); {fix}"
            ) from None
        _, *states = nnx.split(module, *(p.owns for p in self.parts))
        return logits, {p.name: p.pure(s) for p, s in zip(self.parts[:-1], states)}

    def apply(self, variables: dict, images, rngs: dict | None = None, mutable=False, train: bool = False):
        """Linen's apply: logits, and with `mutable` (collection names) also their new values."""
        key = rngs["dropout"] if rngs else jax.random.PRNGKey(0)  # evaluation draws nothing
        states = [p.state(variables[p.name]) for p in self.parts[:-1]]
        module = nnx.merge(self.graphs[0 if train else 1], *states, self._streams(key))
        logits = module(images)
        if not mutable:
            return logits
        updated = {p.name: p.pure(nnx.state(module, p.owns)) for p in self.parts[1:-1] if p.name in mutable}
        return logits, updated

    def _streams(self, key):
        """Every RNG stream of the module set from `key` (raw key data): stream i's key is fold_in(key, i)."""
        rng, flat, i = self.parts[-1], [], 0
        for path, variable in rng.template:
            if isinstance(variable, nnx.RngKey):
                value, i = jax.random.wrap_key_data(jax.random.fold_in(key, i)), i + 1
            else:  # RngCount: how often the stream was drawn from
                value = jnp.zeros(variable.get_value().shape, variable.get_value().dtype)
            flat.append((path, variable.replace(value)))
        return nnx.from_flat_state(flat)


def build(name: str, factory: Callable, num_classes: int):
    """`factory(num_classes=N, rngs=...)` evaluated abstractly: an NnxModel when it returns an nnx.Module,
    else what it returned (contract.py checks that); a one-line UsageError if it cannot be built or split."""
    found = {}

    def construct():
        module = factory(num_classes=num_classes, rngs=nnx.Rngs(0))
        if isinstance(module, nnx.Module):
            found["model"] = _split(name, factory, num_classes, module)
        else:
            found["model"] = module  # not an array: it leaves the trace as it is
        return None

    try:
        jax.eval_shape(construct)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(
            f"--model {name}: factory(num_classes={num_classes}, rngs=nnx.Rngs(seed)) raised "
            f"{type(e).__name__}: {one_line(e)}; fix the factory"
        ) from None
    return found["model"]


def _split(name: str, factory: Callable, num_classes: int, module: nnx.Module) -> NnxModel:
    """The module's parts and its two graphs (training, evaluation), from an abstract module."""
    try:
        flat = list(nnx.to_flat_state(nnx.state(module)))
    except Exception as e:
        raise UsageError(_unsplittable(name, e)) from None
    groups: dict[str, list] = {"params": [], "rng": []}
    for path, leaf in flat:
        if not isinstance(leaf, nnx.Variable):
            raise UsageError(
                f"--model {name} keeps a plain array at {'.'.join(map(str, path))}, outside any nnx.Variable; "
                f"wrap it in nnx.Param (trained) or nnx.BatchStat (kept, not trained)"
            )
        kind = type(leaf)
        group = (
            "rng" if isinstance(leaf, nnx.RngState) else variablelib.variable_name_from_type(kind, allow_register=True)
        )
        value = leaf.get_value()  # a tracer of jax.eval_shape's: only its shape and dtype are kept
        groups.setdefault(group, []).append((path, leaf.replace(jax.ShapeDtypeStruct(value.shape, value.dtype))))
    order = ["params", *sorted(set(groups) - {"params", "rng"}), "rng"]
    parts = tuple(Part(n, frozenset(p for p, _ in groups[n]), tuple(groups[n])) for n in order)
    try:
        module.train()
        training, *_ = nnx.split(module, *(p.owns for p in parts))
        module.eval()
        evaluation, *_ = nnx.split(module, *(p.owns for p in parts))
        model = NnxModel(name, factory, num_classes, (training, evaluation), parts)
    except Exception as e:  # an unhashable static attribute, most often
        raise UsageError(_unsplittable(name, e)) from None
    return model


def _unsplittable(name: str, e: Exception) -> str:
    return (
        f"--model {name}: nnx.split cannot split its module into a static graph and arrays "
        f"({type(e).__name__}: {one_line(e)}); keep static attributes hashable (tuples, not lists or "
        f"dicts) and wrap arrays in nnx.Variable, lists of layers in nnx.List"
    )


def one_line(e: Exception) -> str:
    """The error's first line; all of it, joined, when that line announces what follows (Flax's "Consider one
    of the following options:" for a list of layers: its first line alone cut the advice before any fix)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return "no message"
    return " ".join(lines) if lines[0].endswith(":") else lines[0]
