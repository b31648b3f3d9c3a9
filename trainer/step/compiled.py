"""The first device call compiled ahead, and whether it fits a device, before the state is placed.

`Ahead` compiles the call in a thread while the model initialises (both take seconds on a cold start): the call
then finds the program in XLA's persistent cache. It keeps XLA's own count of the program's buffers on one device
(arguments, temporaries: activations, gradients, gathered parameters, and outputs that reuse no donated argument),
which the first call must allocate: one that exceeds XLA's pool stops here in one line (`check`), with XLA's count
at half the batch (compiled then) and whether that fits, where XLA would otherwise fail at its first allocation
with a page of buffer sizes. Without a compile ahead (--compile-cache off, --parallel pmap, a compile past its
wait) the first call finds out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading

import jax

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan.fit import size_words

WAIT_S = 300  # past this the first call compiles by itself


class Ahead:
    """The runner's call compiled for a state of `shapes` and these `args` (the tally and the batch: arrays, or
    their abstract shapes), in a thread; `host_bytes`: the state's bytes in host memory (--offload), which
    XLA:CPU counts as its own arguments. `enabled` False: nothing compiled (--compile-cache off)."""

    def __init__(self, runner, shapes, host_bytes: int, args: tuple, enabled: bool = True):
        abstract = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        self.runner, self.shapes, self.host_bytes = runner, shapes, host_bytes
        self.args = jax.tree.map(abstract, args)  # shapes only: no batch kept on the devices
        self.buffers: tuple[int, int] | None = None  # (arguments, the rest) once compiled
        self.thread = threading.Thread(target=self._compile, name="dali-launch-compile-ahead", daemon=True)
        if enabled:
            self.thread.start()

    def _compile(self) -> None:
        with contextlib.suppress(Exception):  # a failure here is the real call's to report
            self.buffers = self.at(self.runner.batch_size)

    def join(self, timeout: float = WAIT_S) -> None:
        if self.thread.ident is not None:
            self.thread.join(timeout=timeout)

    def at(self, batch: int) -> tuple[int, int] | None:
        """XLA's count of the call's buffers at `batch` samples per device and step (as many steps a call):
        compiled now; None where the runner compiles nothing ahead or the batch cannot be taken."""
        (tally, rows), size = self.args, self.runner.batch_size
        scale = lambda x: jax.ShapeDtypeStruct(
            (x.shape[0], x.shape[1] // size * batch, *x.shape[2:]), x.dtype, sharding=x.sharding
        )
        try:
            compiled = self.runner.compile(self.shapes, tally, jax.tree.map(scale, rows), batch_size=batch)
        except Exception:  # a batch the call cannot take (the readers' split): no count
            return None
        return None if compiled is None else step_buffers(compiled, self.host_bytes)

    def total(self) -> int | None:
        return None if self.buffers is None else sum(self.buffers)


def step_buffers(compiled, host_arguments: int = 0) -> tuple[int, int] | None:
    """XLA's count of a compiled step's buffers on one device: (its arguments, the rest: activations and other
    temporaries, outputs that do not reuse a donated argument); None where the backend gives none.
    `host_arguments`: the arguments' bytes in host memory (--offload), which XLA:CPU counts as its own."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # not every backend implements it
        return None
    if stats is None:
        return None
    rest = stats.temp_size_in_bytes + max(0, stats.output_size_in_bytes - stats.alias_size_in_bytes)
    arguments = stats.argument_size_in_bytes
    if not getattr(stats, "host_argument_size_in_bytes", 0):  # a backend that tells them apart has left them out
        arguments -= host_arguments
    return arguments, rest


def fits(ahead: Ahead, pool: int | None) -> bool:
    """Whether the step compiled ahead fits `pool`; True where either is unknown."""
    return ahead.buffers is None or pool is None or sum(ahead.buffers) <= pool


def words(ahead: Ahead, where: str = "") -> str:
    """What the step compiled ahead needs on a device (`where`: under which mesh), in words."""
    arguments, rest = ahead.buffers
    return (
        f"{size_words(arguments + rest)} per device{where} (XLA's count: {size_words(arguments)} of train state and "
        f"batch, {size_words(rest)} of activations, gradients and other temporaries, at {ahead.runner.batch_size} "
        "samples per device and step)"
    )


def check(ahead: Ahead, pool: int | None, mesh, recompute: str = "") -> None:
    """Refuses the step compiled ahead where it exceeds `pool`, before the state is placed: its first call could not
    allocate it. `recompute`: the flag that would keep fewer activations, where the model takes one."""
    if fits(ahead, pool):
        return
    recompute_first = (
        f"add {recompute} (activations recomputed in the backward pass, not kept), or " if recompute else ""
    )
    raise UsageError(
        f"the training step needs {words(ahead, f' under --mesh {mesh}')} but a device has {size_words(pool)}; "
        f"{recompute_first}{_batch_that_fits(ahead, pool, sharded(*ahead.buffers, pool, mesh))}"
    )


def sharded(arguments: int, rest: int, pool: int, mesh) -> str:
    """The fsdp count that would hold the step (`arguments`, `rest`: XLA's count under `mesh`), in words: the state
    split over more devices (XLA's arguments, the batch among them, taken as the state: an estimate). The fewest
    that divides the job's devices, else that many devices; "" where the rest alone exceeds `pool`."""
    room, whole, plane = pool - rest, arguments * mesh.fsdp, mesh.data * mesh.fsdp  # the state unsplit, about
    if room <= 0:
        return ""
    least = max(math.ceil(whole / room), mesh.fsdp + 1)
    count = next((k for k in range(least, plane + 1) if plane % k == 0), None)
    if count is None:
        return f"shard the state with --mesh fsdp:{least} over {least} devices (more --nodes or --gpus-per-node)"
    wider = dataclasses.replace(mesh, data=plane // count, fsdp=count)
    return f"shard the state with --mesh {wider} (about {size_words(whole / count + rest)} a device)"


def _batch_that_fits(ahead: Ahead, pool: int, shard: str) -> str:
    """The fix, from XLA's count at half the batch: a compiled count, not a line through two (XLA's buffers do
    not grow linearly with the batch: the MLP on CPU needed 38.5, 42.1, 53.2 and 92.5 MiB at 332, 664, 1000
    and 2000 samples); `shard`: the mesh that would hold it, in words, if any."""
    half = ahead.runner.batch_size // 2
    other = ahead.at(half) if half else None
    also = f", or {shard}" if shard else ""
    if other is None:
        return f"use a smaller --batch-size or bf16{also}"
    if sum(other) <= pool:
        return f"--batch-size {half} fits (XLA's count there: {size_words(sum(other))}); or use bf16{also}"
    return f"at --batch-size {half} it would still need {size_words(sum(other))}: use bf16 or a smaller batch{also}"
