"""A task run dry: checked against its model and one sample of each of its pipeline's outputs, abstractly
(jax.eval_shape: nothing computed, no device taken): the model initialised on it, the task's loss and evaluation traced on a
batch of them, and its `summary` called on sums of its evaluation's shapes (ones: a ratio of two sums stays
finite), its `headline` looked up in what that returns. What does not fit is one line before anything is
written. The launcher calls it where the samples' shapes are known (a built-in pipeline's, or a pipeline of
one's own run for one batch on the CPU); the task meets the same rules again as it traces its step (step/sgd.py)
and after its first evaluation."""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from dali_launch.trainer.errors import UsageError, said, where
from dali_launch.trainer.model.forward import Forward, train_kwarg
from dali_launch.trainer.step.sgd import loss_and_metrics
from dali_launch.trainer.step.view import JIT_JOB, StepView, evaluating

ROWS = 2  # samples of the abstract batch: enough to tell a per-sample axis from a batch reduction


def check(task, model, sample: dict, names: tuple[str, str, str]) -> None:
    """`sample`: {output: (shape of one sample, dtype)} as the pipeline gives them; `names`: the values of --task,
    --model and --pipeline, for the messages."""
    name, model_name, pipeline = names
    missing = [output for output in task.outputs if output not in sample]
    if missing:
        raise UsageError(
            f"--task {name} takes the outputs {', '.join(task.outputs)}, but the pipeline gives "
            f"{', '.join(sample)}; return one DataNode for each, in that order"
        )
    _not_swapped(sample, pipeline)
    batch = {o: jax.ShapeDtypeStruct((ROWS, *sample[o][0]), sample[o][1]) for o in task.outputs}
    valid = jax.ShapeDtypeStruct((ROWS,), jnp.float32)
    variables, outputs = _model_outputs(model, batch[task.model_input], task.model_input, model_name)
    if task.check_model:
        task.check_model(model_name, outputs)
    forward = Forward(model)
    training = lambda v, b, m: loss_and_metrics(task, task.loss(_training(forward, v, m), b))
    _traced(name, "loss", training, variables, batch, valid)
    evaluate = lambda v, b, m: task.evaluate(evaluating(forward, v, m), b)
    sums = _traced(name, "evaluate", evaluate, variables, batch, valid)
    if not isinstance(sums, dict) or not sums:
        raise UsageError(
            f"--task {name}: its evaluate returned {type(sums).__name__}; return a dict of sums, {{name: sum}}"
        )
    summarised(task, name, {key: np.shape(value) for key, value in sums.items()})


def _not_swapped(sample: dict, pipeline: str) -> None:
    """Images and labels given in each other's places: float labels shaped like an image (HWC) beside integer
    images shaped like a class id. Left alone, the model or the loss would fail on them without saying why."""
    if not {"images", "labels"} <= set(sample):
        return
    (images, images_dtype), (labels, labels_dtype) = sample["images"], sample["labels"]
    image_like = len(labels) >= 2 and np.dtype(labels_dtype).kind == "f"
    if image_like and len(images) <= 1 and np.dtype(images_dtype).kind in "iu":
        raise UsageError(
            f"--pipeline {pipeline} gives labels of {labels} {labels_dtype} and images of {images} "
            f"{images_dtype} a sample: images and labels swapped; return images, labels, in that order"
        )


def _model_outputs(model, example, input_name: str, model_name: str):
    """The model's abstract variables and outputs on one sample of `example`'s shape; its failure one line."""
    try:
        return _initialised(model, example)
    except UsageError:
        raise
    except Exception as e:  # the user's model on the pipeline's shapes: one line, where
        at = where(e)
        raise UsageError(
            f"--model {model_name} failed on one sample of shape {(1, *example.shape[1:])} "
            f"({f'{at}: ' if at else ''}{said(e)}); make it take the pipeline's {input_name}"
        ) from None


def summarised(task, name: str, shapes: dict) -> None:
    """The task's `summary` of sums shaped as its evaluation gives them (`shapes`, by name; the count beside them),
    as the evaluation hands them over: floats for scalars, float64 arrays; its headline one of the values it
    returns, a number."""
    sums = {key: np.ones(shape) if shape else 1.0 for key, shape in shapes.items()} | {"count": float(ROWS)}
    try:
        values = task.summary(sums)
    except Exception as e:  # the user's summary: one line, where
        at = where(e)
        raise UsageError(
            f"--task {name}: its summary failed on sums of its evaluation's shapes ({f'{at}: ' if at else ''}"
            f"{said(e)}); fix the summary"
        ) from None
    if not isinstance(values, dict) or not values:
        raise UsageError(f"--task {name}: its summary returned {type(values).__name__}; return a dict, {{name: value}}")
    headline = task.headline_of(values)
    if headline not in values:
        raise UsageError(
            f"--task {name}: its headline {headline!r} is not a value its summary gives ({', '.join(values)}); "
            f"name one of them"
        )
    if not isinstance(values[headline], numbers.Real) and np.shape(values[headline]) != ():
        raise UsageError(
            f"--task {name}: its headline {headline!r} is an array of shape {np.shape(values[headline])}, not a "
            f"number; headline one of the numbers its summary gives"
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
        raise UsageError(
            f"--task {name}: its {what} failed on a batch of the pipeline's shapes ({said(e)}); "
            "fix the task, or the outputs it takes"
        ) from None
