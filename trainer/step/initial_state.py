"""The train state a run starts from: the model initialised, with its optimizer, schedule and recipe.
Free of DALI and the data side, so benchmarks of the step alone build the trainer's own state."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.entry_points import run_model
from dali_launch.trainer.model.contract import width_error
from dali_launch.trainer.model.forward import Forward, train_kwarg
from dali_launch.trainer.step import optim
from dali_launch.trainer.step.mixing import Mixing
from dali_launch.trainer.step.state import Recipe, TrainState


def state_maker(spec: TaskSpec, slots_per_epoch: int):
    """`fresh(example) -> (logits, state)`: the model initialised on `example`, a zero batch of one sample
    shaped like the pipeline's images, with the optimizer and schedule for epochs of `slots_per_epoch` SGD
    steps; traceable, so a benchmark may jit it for its own device or only ask its shapes."""
    t = spec.train
    model = run_model(spec)
    forward = Forward(model, t.precision)
    train_kwargs = {name: False for name in [train_kwarg(model)] if name}  # BatchNorm: keep its initial statistics
    mixing = Mixing(t.mixup, t.cutmix)
    recipe = Recipe(
        accumulate_steps=t.accumulate_steps,
        ema_decay=t.ema_decay,
        label_smoothing=t.label_smoothing,
        skip_nonfinite=t.on_nan == "skip-step",
        mixing=mixing,
        num_classes=spec.data.num_classes,
    )
    tx, schedule = optim.optimizer(t), optim.schedule(t, slots_per_epoch)

    def fresh(example):
        params_key = jax.random.PRNGKey(t.seed)  # as before dropout existed: the same initial parameters
        dropout_key = jax.random.fold_in(params_key, 1)
        rngs = {"params": params_key, "dropout": dropout_key}
        logits, variables = model.init_with_output(rngs, example, **train_kwargs)
        rng = jax.random.fold_in(dropout_key, 2)
        return logits, TrainState.create(dict(variables), rng, forward, tx, schedule, recipe)

    return fresh


def create_train_state(spec: TaskSpec, example: np.ndarray, slots_per_epoch: int) -> TrainState:
    """The trainer's initial state (state_maker), checked against --num-classes by its own forward pass."""
    t, fresh = spec.train, state_maker(spec, slots_per_epoch)
    # One program on the host's CPU (in XLA's persistent cache): the init, the optimizer's state and the keys.
    # Eager, each of their operations would compile on its own for the device, seconds of a start-up.
    logits, state = jax.jit(fresh, backend="cpu")(example)
    if jnp.shape(logits) != (1, spec.data.num_classes):  # the init's own forward pass: no extra cost
        raise width_error(t.model, jnp.shape(logits), spec.data.num_classes)
    return state
