"""`--task classification` (the default): images and class labels, softmax cross-entropy, top-1 accuracy.

The pipeline gives `images` and `labels`: integer class ids (shape () or (1,)) in 0..--num-classes - 1, or float
one-hot or soft targets (--num-classes wide). The loss is the softmax cross-entropy of the model's logits against
the one-hot targets, smoothed by --label-smoothing, then mixed by --mixup/--cutmix on each device's batch of a
step (tasks/mixing.py), summed over real samples. Evaluation counts the test samples whose largest logit is their
class. Class ids out of range are caught while training (data/label_check.py's words): nothing else fails on
them (`jax.nn.one_hot` of 12 with 10 classes is a zero row, its loss 0).
"""

from __future__ import annotations

from functools import partial

from dali_launch.trainer.tasks.contract import Bounds, Task


def classification(num_classes: int = 10, label_smoothing: float = 0.0, mixup: float = 0.0, cutmix: float = 0.0):
    """The task, for --num-classes classes with the [task] table's options (JAX is imported only where it runs)."""
    options = {"num_classes": num_classes, "smoothing": label_smoothing, "mixing": (mixup, cutmix)}
    return Task(
        outputs=("images", "labels"),
        loss=partial(_loss, **options),
        evaluate=_evaluate,
        headline="accuracy",
        better="higher",
        unit="images",
        bounds=bounded_class_ids("labels", num_classes),
        check_model=partial(_check_model, num_classes),
    )


def _loss(step, batch, num_classes: int, smoothing: float, mixing: tuple[float, float]):
    import jax.numpy as jnp
    import optax

    from dali_launch.trainer.tasks import mixing as mixes

    images, labels, goal, mixing = batch["images"], batch["labels"], None, mixes.Mixing(*mixing)
    if mixing.on:  # the images change before the forward pass, the targets with them
        goal = _smoothed(smoothing, _targets(labels, num_classes, mixes=True))
        images, goal = step.per_device(partial(mixes.mix, mixing=mixing), images, goal, stream=mixes.STREAM)
    logits = step.model(images)
    goal = goal if goal is not None else _smoothed(smoothing, _targets(labels, logits.shape[-1]))
    return jnp.sum(optax.softmax_cross_entropy(logits, goal) * step.valid)


def _evaluate(step, batch):
    import jax.numpy as jnp

    from dali_launch.trainer.data.contract import class_ids

    predicted = jnp.argmax(step.model(batch["images"]), -1)
    return {"accuracy": jnp.sum((predicted == class_ids(batch["labels"])) * step.valid)}


def _targets(labels, num_classes: int, mixes: bool = False):
    """One-hot targets: float labels are used as they are, integer class ids are one-hot encoded here."""
    import jax

    from dali_launch.trainer.errors import UsageError

    if labels.dtype.kind == "f":
        if labels.shape[-1] != num_classes:  # found while tracing: shapes are static
            given, fix = (
                f"float labels (one-hot or soft targets) {labels.shape[-1]} wide",
                f"make them {num_classes} wide",
            )
            if mixes:  # mixing comes first, before the model could say so
                raise UsageError(
                    f"--mixup/--cutmix mix targets {num_classes} wide (--num-classes {num_classes}), but the pipeline "
                    f"gave {given}; {fix}, or give class ids"
                )
            raise UsageError(f"the pipeline gave {given} but --num-classes is {num_classes}; {fix}, or give class ids")
        return labels
    return jax.nn.one_hot(labels.reshape(labels.shape[0]), num_classes)


def _smoothed(smoothing: float, goal):
    """--label-smoothing, before any mixing (timm's order)."""
    import optax

    return optax.smooth_labels(goal, smoothing) if smoothing else goal


def bounded_class_ids(output: str, num_classes: int, values=None) -> Bounds:
    """Output `output`'s class ids, in 0..num_classes-1 (data/label_check.py's line where one is not): a task's
    `bounds`. `values(batch)` gives them where the output holds more than ids (padding rows), else they are read
    from it (data/contract.py's class_ids: one-hot rows too; float targets have none to bound)."""
    return Bounds((output,), values or partial(_ids, output), partial(_in_range, output, num_classes))


def _ids(output: str, batch) -> dict:
    from dali_launch.trainer.data.contract import class_ids

    labels = batch[output]
    return {output: None if labels.dtype.kind == "f" else class_ids(labels)}


def _in_range(output: str, num_classes: int, low: dict, high: dict, split: str, pipeline: str) -> None:
    from dali_launch.trainer.data.label_check import check_range

    check_range(low[output], high[output], num_classes, pipeline, split)


def _check_model(num_classes: int, name: str, logits) -> None:
    """Logits (1, --num-classes) for one sample, or the one line that says what the model returned."""
    from dali_launch.trainer.model.contract import width_error

    if getattr(logits, "shape", None) != (1, num_classes):
        raise width_error(name, getattr(logits, "shape", type(logits).__name__), num_classes)
