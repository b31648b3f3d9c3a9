"""The train state a run starts from: the model initialised, with its optimizer, schedule and recipe.
Free of DALI and the data side, so benchmarks of the step alone build the trainer's own state."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import jax
import numpy as np

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.model.forward import Forward, train_kwarg
from dali_launch.trainer.model.registry import run_model
from dali_launch.trainer.step import optim
from dali_launch.trainer.step.state import Recipe, TrainState
from dali_launch.trainer.tasks.contract import Task
from dali_launch.trainer.tasks.registry import run_task


class Made(NamedTuple):
    """What a train state is made of beside the spec: the model (the module its factory made with the plan's
    options), the run's task, and the learning rate's scale (elastic.py's rescale rule; the plan's)."""

    model: object
    task: Task
    lr_scale: float = 1.0

    @classmethod
    def of(cls, spec: TaskSpec) -> Made:
        """The spec's own, as its settings name them (no plan): what a benchmark or a test builds from."""
        return cls(run_model(spec), run_task(spec))


def state_maker(spec: TaskSpec, slots_per_epoch: int, made: Made | None = None):
    """`fresh(example) -> (logits, state)`: the model initialised on `example`, a zero batch of one sample
    shaped like the pipeline's images, with the optimizer and schedule for epochs of `slots_per_epoch` SGD
    steps; traceable, so a benchmark may jit it for its own device or only ask its shapes. `made`: the model and
    task the task's plan made (None: the spec's own, Made.of)."""
    opt, (model, task, lr_scale) = spec.optimizer, made or Made.of(spec)
    forward = Forward(model, spec.model.precision)
    train_kwargs = {name: False for name in [train_kwarg(model)] if name}  # BatchNorm: keep its initial statistics
    recipe = Recipe(
        accumulate_steps=opt.accumulate_steps,
        ema_decay=opt.ema_decay,
        skip_nonfinite=spec.step.on_nan == "skip-step",
        task=task,
    )
    tx, schedule = optim.optimizer(opt), optim.schedule(opt, spec.step.epochs, slots_per_epoch, lr_scale)

    def fresh(example):
        params_key = jax.random.PRNGKey(spec.step.seed)  # as before dropout existed: the same initial parameters
        dropout_key = jax.random.fold_in(params_key, 1)
        rngs = {"params": params_key, "dropout": dropout_key}
        logits, variables = model.init_with_output(rngs, example, **train_kwargs)
        rng = jax.random.fold_in(dropout_key, 2)
        return logits, TrainState.create(dict(variables), rng, forward, tx, schedule, recipe)

    return fresh


class InitialState:
    """The trainer's initial state (state_maker), traced once: its `shapes` at once (what the runners and the
    step's compile ahead need, nothing computed), its values from `create()`. Checked against --num-classes
    by the init's own forward pass, at the trace, against what its task takes (tasks/contract.py: check_model)."""

    def __init__(self, spec: TaskSpec, example: np.ndarray, slots_per_epoch: int, made: Made | None = None):
        # One program on the host's CPU (in XLA's persistent cache): the init, the optimizer's state and the keys.
        # Eager, each of their operations would compile on its own for the device, seconds of a start-up.
        # (jit's backend= is deprecated: the example, committed to the CPU, places the program there.)
        self.slots, self.made = slots_per_epoch, made or Made.of(spec)
        self._cpu = jax.local_devices(backend="cpu")[0]
        on_cpu = jax.ShapeDtypeStruct(
            example.shape, example.dtype, sharding=jax.sharding.SingleDeviceSharding(self._cpu)
        )
        self._traced = jax.jit(state_maker(spec, slots_per_epoch, self.made)).trace(on_cpu)
        self._example = example
        outputs, state = self._traced.out_info
        task = state.recipe.task
        if task.check_model:
            task.check_model(spec.model.model, outputs)
        # as jax.eval_shape gave them (a weak type kept), without the trace's CPU placement: the step compiles
        # ahead for the run's own devices
        self.shapes: TrainState = jax.tree.map(
            lambda o: jax.ShapeDtypeStruct(o.shape, o.dtype, weak_type=o.weak_type), state
        )
        self._ahead: Future | None = None

    def start(self) -> None:
        """`create`'s compile and run begun in a thread: set_up.py builds the pipelines meanwhile, where a cold
        start compiled the init after them (2.1 s on the CPU of an H200 host, XLA leaving the GIL while it works)."""
        self._ahead = ThreadPoolExecutor(1, "dali-launch-init").submit(self._create)

    def create(self) -> TrainState:
        return self._create() if self._ahead is None else self._ahead.result()

    def _create(self) -> TrainState:
        return self._traced.lower().compile()(jax.device_put(self._example, self._cpu))[1]

    def placeholders(self) -> TrainState:
        """The state's structure as uninitialised host arrays: what a checkpoint is restored into, without
        lowering, compiling or running the init whose values the checkpoint replaces."""
        return jax.tree.map(lambda s: np.empty(s.shape, s.dtype), self.shapes)


def create_train_state(spec: TaskSpec, example: np.ndarray, slots_per_epoch: int, made: Made | None = None):
    """The trainer's initial state, computed (InitialState)."""
    return InitialState(spec, example, slots_per_epoch, made).create()
