#!/usr/bin/env python3
"""The step time of a Flax NNX model against its Linen twin, in one run: `--model cnn` (Linen)
and `--model cnn-nnx` through both NNX adapters, each in the trainer's own device call
(trainer/step/parallel.py: the fused SGD steps, the tally, donation, --parallel).

    linen   the built-in CNN (trainer/model/models.py)
    split   its NNX twin through model/nnx_model.py: split once, merged at trace time (the trainer's)
    bridge  the same twin through model/nnx_bridge.py: Flax's own nnx.bridge.ToLinen

On one H200 (no DALI needed: random images stand in for the pipeline's, already on the device):

    python3 benchmarks/nnx_step.py --out benchmarks/results/nnx_step/h200.json

A round times one epoch of the example's steps (1,200 of batch 50, 24 fused per call, what
--steps-per-call auto gives on a GPU) of every contender in turn, so a drift of clocks reaches
all of them alike, and each goes first in turn; after a first call that compiles and one untimed
epoch, --rounds rounds. The table gives each one's median and best epoch, their spread, ms per step
and the median's ratio to Linen's: the issue's target is within 3 % (ratio <= 1.03). The exit
status is 0 either way; the table says which NNX adapter is faster.

`--smoke-cpu` runs it on CPU JAX (for checking the script: its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from report import environment, listed

TARGET = 1.03  # the bound on NNX / Linen step time
CONTENDERS = ("linen", "split", "bridge")


def train_state(model_name: str, adapter: str, steps_per_epoch: int, precision: str):
    """The host train state of `model_name`, as trainer/step/initial_state.py's create_train_state makes it (that
    module imports DALI, which the GPU machine lacks): the same calls, seed 0, the default optimizer."""
    import jax
    import numpy as np

    from dali_launch.trainer.config import OptimizerConfig, StepConfig
    from dali_launch.trainer.model.forward import Forward, train_kwarg
    from dali_launch.trainer.model.registry import create_model
    from dali_launch.trainer.step import optim
    from dali_launch.trainer.step.state import Recipe, TrainState
    from dali_launch.trainer.tasks.classification import classification

    model = create_model(model_name, 10, adapter=adapter)
    config = OptimizerConfig()
    key = jax.random.PRNGKey(0)
    kwargs = {k: False for k in [train_kwarg(model)] if k}
    init = jax.jit(
        lambda x: model.init_with_output({"params": key, "dropout": jax.random.fold_in(key, 1)}, x, **kwargs)
    )
    variables = init(np.zeros((1, 784), np.float32))[1]
    return TrainState.create(
        dict(variables),
        jax.random.fold_in(key, 2),
        Forward(model, precision),
        optim.optimizer(config),
        optim.schedule(config, StepConfig().epochs, steps_per_epoch),
        Recipe(classification()),
    )


class Contender:
    """One model and adapter in one --parallel mode, its state on the device and its inputs."""

    def __init__(self, name: str, model: str, adapter: str, parallel_mode: str, args):
        import jax
        import numpy as np

        from dali_launch.trainer.data.rows import AXIS
        from dali_launch.trainer.step import parallel
        from dali_launch.trainer.step.sgd import call_tally

        self.name, self.label = name, f"{name} ({model}, {parallel_mode})"
        devices = jax.local_devices()[:1]
        rows, self.calls = args.batch_size * args.steps_per_call, args.steps // args.steps_per_call
        mesh = jax.sharding.Mesh(np.array(devices), (AXIS,))
        data = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
        self.mode = parallel.create(parallel_mode, devices, devices, args.batch_size, data)
        host = jax.tree.map(np.asarray, train_state(model, adapter, args.steps, args.precision))
        self.state = self.mode.place(host)
        rng = np.random.default_rng(0)
        put = lambda x: jax.device_put(x[None], data)  # (devices, rows, ...), as DALI's batches come
        images, labels = rng.random((rows, 784), np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, rows)]
        self.batch = {"images": put(images), "labels": put(labels), "valid": put(np.ones(rows, np.float32))}  # mnist's
        zero = {"position": np.int32(0), "loss": np.float32(0), "count": np.float32(0)}
        self.tally = jax.tree.map(lambda x: put(np.asarray(x)), call_tally(zero, host.recipe.task))
        self.epochs_s: list[float] = []

    def epoch(self) -> float:
        import jax

        start = time.perf_counter()
        for _ in range(self.calls):
            self.state, self.tally = self.mode.call(self.state, self.tally, self.batch)
        jax.block_until_ready(self.tally)
        return time.perf_counter() - start

    def compile(self) -> float:
        """The first call compiles; then the state trains on, as a run's would."""
        import jax

        start = time.perf_counter()
        self.state, self.tally = self.mode.call(self.state, self.tally, self.batch)
        jax.block_until_ready(self.tally)
        return time.perf_counter() - start

    def summary(self, steps: int, compile_s: float) -> dict:
        import numpy as np

        loss = float(np.asarray(self.tally["loss"]).ravel()[0] / np.asarray(self.tally["count"]).ravel()[0])
        median = statistics.median(self.epochs_s)
        return {
            "name": self.name,
            "label": self.label,
            "compile_s": compile_s,
            "epochs_s": self.epochs_s,
            "median_epoch_s": median,
            "best_epoch_s": min(self.epochs_s),
            "spread": statistics.pstdev(self.epochs_s) / median,  # relative: the noise a ratio carries
            "ms_per_step": 1000 * median / steps,
            "mean_loss": loss,
        }


def run(args) -> list[dict]:
    """Every contender of every --parallel mode, rounds interleaved; ratios against that mode's Linen."""
    results = []
    for mode in args.parallel:
        contenders = [Contender("linen", args.linen, "split", mode, args)]
        contenders += [Contender(a, args.nnx, a, mode, args) for a in args.adapters]
        compiled = {c.name: c.compile() for c in contenders}
        for c in contenders:
            c.epoch()  # untimed: whatever a first epoch still does once
        for r in range(args.rounds):
            for c in contenders[r % len(contenders) :] + contenders[: r % len(contenders)]:  # each goes first in turn
                c.epochs_s.append(c.epoch())
        rows = [c.summary(args.calls_steps, compiled[c.name]) for c in contenders]
        base = rows[0]["median_epoch_s"]
        for r in rows:
            r.update(parallel=mode, vs_linen=r["median_epoch_s"] / base)
        results += rows
    return results


def table(results: list[dict]) -> str:
    head = (
        f"{'contender':<34}{'compile s':>10}{'median s':>10}{'best s':>9}{'spread':>8}{'ms/step':>9}{'vs linen':>10}"
        "  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        verdict = "" if r["name"] == "linen" else ("within 3 %" if r["vs_linen"] <= TARGET else "OVER 3 %")
        lines.append(
            f"{r['label']:<34}{r['compile_s']:>10.2f}{r['median_epoch_s']:>10.4f}{r['best_epoch_s']:>9.4f}"
            f"{r['spread']:>8.1%}{r['ms_per_step']:>9.4f}{r['vs_linen']:>10.4f}  {verdict}"
        )
    for mode in dict.fromkeys(r["parallel"] for r in results):
        nnx = [r for r in results if r["parallel"] == mode and r["name"] != "linen"]
        if len(nnx) > 1:
            fast = min(nnx, key=lambda r: r["median_epoch_s"])
            lines.append(f"{mode}: the faster NNX adapter is {fast['name']} ({fast['vs_linen']:.4f} x linen)")
    lines.append(
        "one epoch = the steps of one round; median and best over the rounds, spread = their standard deviation "
        "/ median; vs linen: median / linen's median"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linen", default="cnn", help="The Linen model (default cnn).")
    parser.add_argument("--nnx", default="cnn-nnx", help="Its NNX twin (default cnn-nnx).")
    parser.add_argument("--adapters", type=listed(choices=CONTENDERS[1:]), default="split,bridge")
    parser.add_argument("--parallel", type=listed(choices=("sharded", "pmap")), default="sharded")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument(
        "--steps", type=int, default=1200, help="SGD steps a round (default 1200, the example's epoch)."
    )
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--steps-per-call", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=20, help="Timed epochs of each contender (default 20).")
    parser.add_argument("--out", type=Path, help="Write the table and every number as JSON here.")
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU JAX: checks the script only.")
    args = parser.parse_args(argv)
    if args.smoke_cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    args.calls_steps = args.steps // args.steps_per_call * args.steps_per_call  # steps a round really takes
    results = run(args)
    text = table(results)
    print(text, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"argv": sys.argv, "environment": environment(), "results": results, "table": text}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
