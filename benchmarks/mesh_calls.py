"""The device call benchmarks/mesh_step.py times: the trainer's own train state and Sharded runner on random
float16 images already on one device, compiled, warmed, timed, and its memory read. No DALI is imported."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from report import OFF_GRAPHS


def model_name(name: str) -> str:
    """--model for `name`: a built-in name as it is, a rung as mesh_step.py's factory (its module-level
    __getattr__; benchmarks/ is on sys.path: the script's folder)."""
    return name if name.startswith("vit-") and name[4:] in ("ti16", "s16", "b16") else f"mesh_step:{name}"


@dataclass(frozen=True)
class Setup:
    model: str
    batch: int
    image_size: int
    precision: str
    steps: int  # SGD steps per device call
    num_classes: int = 1000
    remat: str = "none"  # --remat: blocks recomputes each block's activations in the backward pass


def fresh_state(setup: Setup):
    """The trainer's own initial state (step/initial_state.state_maker: free of DALI) for AdamW at this setup.
    Returns (fresh, example): the init as a function of a one-sample batch, for jax.eval_shape (the abstract
    state) or jit on the host's CPU (the real one, as the trainer)."""
    import numpy as np

    from dali_launch.trainer.config import DataConfig, TaskSpec, replaced
    from dali_launch.trainer.step.initial_state import state_maker

    data = DataConfig(num_classes=setup.num_classes, image_size=setup.image_size)
    spec = TaskSpec(run_dir="unused", data=data)
    spec = replaced(
        spec, model=model_name(setup.model), precision=setup.precision, optimizer="adamw", remat=setup.remat
    )
    return state_maker(spec, 1000), np.zeros((1, setup.image_size, setup.image_size, 3), np.float16)


class LaidOut:
    """A plan/mesh.Mesh of one device whose state is laid out as an fsdp mesh's: Sharded then takes its
    fsdp branch (shardings.state_shardings, shardings.keeping) where Mesh(fsdp=1).shards_state keeps it replicated."""

    data = fsdp = tensor = devices = 1
    shards_state = True

    def __str__(self) -> str:
        return "fsdp:1 (layout path)"


def runner(setup: Setup, device, shapes, layout: bool, offload: bool = False):
    """The trainer's Sharded runner on `device` (parallel.create, as set_up makes it; `offload`: the optimizer's
    state in host memory) and a call's batch."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dali_launch.trainer.data.rows import AXIS
    from dali_launch.trainer.step import parallel
    from dali_launch.trainer.step.sgd import call_tally
    from dali_launch.trainer.tasks.classification import classification

    mesh = jax.sharding.Mesh(np.array([device]), (AXIS,))
    data = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    mode = parallel.create(
        "sharded",
        [device],
        [device],
        setup.batch,
        data,
        parallel.How(spread=parallel.Spread(LaidOut() if layout else None, shapes, offload)),
    )
    rows = setup.batch * setup.steps
    side = setup.image_size
    images = jax.jit(lambda key: jax.random.normal(key, (1, rows, side, side, 3), jnp.float16), out_shardings=data)(
        jax.random.PRNGKey(1)
    )
    labels = jax.device_put(np.arange(rows, dtype=np.int32)[None] % setup.num_classes, data)
    valid = jax.device_put(np.ones((1, rows), np.float32), data)
    zero = {"position": np.zeros((), np.int32), "loss": np.zeros((), np.float32), "count": np.zeros((), np.float32)}
    # ^ checkpoint.zero_tally (resilience/checkpoint.py imports DALI and Orbax)
    task = classification(setup.num_classes)
    tally = jax.tree.map(lambda x: jax.device_put(np.asarray(x)[None], data), call_tally(zero, task))
    return mode, tally, {"images": images, "labels": labels, "valid": valid}


def compiled(mode, shapes, tally, batch):
    """`mode.call` compiled for a state of `shapes` laid out as `mode` places it, and the seconds it took."""
    import jax

    from dali_launch.trainer.plan.xla_options import typed

    leaves, structure = jax.tree.flatten(shapes)
    shardings = mode.shardings or [mode.replicated] * len(leaves)
    abstract = structure.unflatten(
        [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=at) for x, at in zip(leaves, shardings)]
    )
    began = time.perf_counter()
    call = mode.call.lower(abstract, tally, batch).compile(compiler_options=typed(OFF_GRAPHS))
    return call, time.perf_counter() - began


def timed(call, state, tally, batch, rows: int, seconds: float, at_least: int = 3):
    """`call` run for about `seconds` (at least `at_least` calls): (state, tally, images/s, calls, seconds)."""
    import jax

    began = time.perf_counter()
    state, tally = call(state, tally, batch)
    jax.block_until_ready(tally)
    calls = max(at_least, math.ceil(seconds / (time.perf_counter() - began))) - 1
    for _ in range(calls):
        state, tally = call(state, tally, batch)
    jax.block_until_ready(tally)
    elapsed = time.perf_counter() - began
    return state, tally, (calls + 1) * rows / elapsed, calls + 1, elapsed


def warm(call, state, tally, batch, calls: int = 2):
    import jax

    for _ in range(calls):
        state, tally = call(state, tally, batch)
    jax.block_until_ready(tally)
    return state, tally


def memory(call, device) -> dict:
    """XLA's compiled buffers of `call` and the device's counters (None where the device does not say)."""
    out = {}
    try:
        analysis = call.memory_analysis()
        for key in ("argument", "output", "temp", "alias", "generated_code"):
            out[f"xla_{key}_bytes"] = int(getattr(analysis, f"{key}_size_in_bytes"))
    except Exception:  # some backends keep no analysis
        pass
    stats = device.memory_stats() or {}
    out["peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
    out["pool_bytes"] = stats.get("bytes_limit")
    return out


def replace_model(setup: Setup, name: str) -> Setup:
    return replace(setup, model=name)
