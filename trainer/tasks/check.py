"""A task checked against its model and one sample of each of its pipeline's outputs, abstractly (jax.eval_shape:
nothing computed, no device taken): what does not fit is one line before anything is written. The launcher calls
it where the samples' shapes are known (a built-in pipeline's, or a pipeline of one's own run for one batch on
the CPU); the task meets the same rules again as it traces its step (step/sgd.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model.forward import Forward, train_kwarg
from dali_launch.trainer.step.sgd import loss_and_metrics
from dali_launch.trainer.step.view import JIT_JOB, StepView, evaluating

ROWS = 2  # samples of the abstract batch: enough to tell a per-sample axis from a batch reduction


def check(task, model, sample: dict, name: str, model_name: str) -> None:
    """`sample`: {output: (shape of one sample, dtype)} as the pipeline gives them; `name` and `model_name`: the
    values of --task and --model."""
    missing = [output for output in task.outputs if output not in sample]
    if missing:
        raise UsageError(
            f"--task {name} takes the outputs {', '.join(task.outputs)}, but the pipeline gives "
            f"{', '.join(sample)}; return one DataNode for each, in that order"
        )
    batch = {o: jax.ShapeDtypeStruct((ROWS, *sample[o][0]), sample[o][1]) for o in task.outputs}
    valid = jax.ShapeDtypeStruct((ROWS,), jnp.float32)
    variables, outputs = _initialised(model, batch[task.model_input])
    if task.check_model:
        task.check_model(model_name, outputs)
    forward = Forward(model)
    _traced(
        name,
        "loss",
        lambda v, b, m: loss_and_metrics(task, task.loss(_training(forward, v, m), b)),
        variables,
        batch,
        valid,
    )
    sums = _traced(
        name, "evaluate", lambda v, b, m: task.evaluate(evaluating(forward, v, m), b), variables, batch, valid
    )
    if not isinstance(sums, dict) or not sums:
        raise UsageError(
            f"--task {name}: its evaluate returned {type(sums).__name__}; return a dict of sums, {{name: sum}}"
        )


def _initialised(model, example):
    """The model's abstract variables and outputs on one sample (its `train` False: BatchNorm's statistics kept)."""
    kwargs = {k: False for k in [train_kwarg(model)] if k}
    one = jax.ShapeDtypeStruct((1, *example.shape[1:]), example.dtype)

    def init(x):
        key = jax.random.PRNGKey(0)  # made in the trace: a concrete key would start a JAX backend
        outputs, variables = model.init_with_output({"params": key, "dropout": key}, x, **kwargs)
        return dict(variables), outputs

    variables, outputs = jax.eval_shape(init, one)
    return variables, outputs


def _training(forward, variables, valid) -> StepView:
    """A training step's view of the abstract variables: the model with dropout on, no statistics kept."""
    key = lambda device: jax.random.fold_in(jax.random.PRNGKey(0), device)
    apply = lambda x, call: (forward(variables, x, True, key(call))[0], {})
    return StepView(apply, valid, JIT_JOB, key_of=key)


def _traced(name: str, what: str, fn, *args):
    """`fn(*args)` traced abstractly; the task's own failure as one line naming the part of it that failed."""
    try:
        return jax.eval_shape(fn, *args)
    except UsageError:
        raise
    except Exception as e:  # the user's code on the pipeline's shapes: one line, where
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise UsageError(
            f"--task {name}: its {what} failed on a batch of the pipeline's shapes ({type(e).__name__}: {first}); "
            "fix the task, or the outputs it takes"
        ) from None
