"""`--task segmentation`: images and masks of class ids, per-pixel cross-entropy, mean IoU.

The pipeline gives `images` and `masks`: (H, W) integer class ids in 0..--num-classes - 1, one per pixel
(`--pipeline segmentation` and `--model unet` are the task's own). The model returns per-pixel logits
(batch, H, W, --num-classes). A sample's loss is the softmax cross-entropy of its pixels (smoothed by
--label-smoothing) averaged over them, summed over the real samples: every image weighs the same, and the
step's mean over the job's samples stays exact under padding. Training also reports pixel accuracy.
Evaluation sums, over the whole test set, each class's intersection (pixels of it predicted as it) and union
(pixels of it, or predicted as it) and the pixels counted; the summary is the mean IoU over the classes
present (a union above 0) and the pixel accuracy. Mask ids out of range stop the run in one line: the
launcher reads every mask of a built-in data set first; a pipeline of one's own is caught while training.
"""

from __future__ import annotations

from functools import partial

from dali_launch.trainer.tasks.contract import Bounds, Task


def segmentation(num_classes: int = 2, label_smoothing: float = 0.0, mixup: float = 0.0, cutmix: float = 0.0):
    """The task for --num-classes classes (the background one of them); --mixup and --cutmix are refused."""
    if mixup or cutmix:
        from dali_launch.trainer.errors import UsageError

        given = " and ".join(f"--{name} {value}" for name, value in (("mixup", mixup), ("cutmix", cutmix)) if value)
        raise UsageError(f"{given}: mixing is for classification targets; --task segmentation takes none, leave it out")
    return Task(
        outputs=("images", "masks"),
        loss=partial(_loss, num_classes=num_classes, smoothing=label_smoothing),
        evaluate=_evaluate,
        summary=_summary,
        headline="miou",
        better="higher",
        unit="images",
        pipeline="segmentation",
        model="unet",
        metrics=("pixel_accuracy",),
        bounds=Bounds(("masks",), lambda batch: {"masks": batch["masks"]}, partial(_check_bounds, num_classes)),
        check_model=partial(_check_model, num_classes),
    )


def _loss(step, batch, num_classes: int, smoothing: float):
    import jax
    import jax.numpy as jnp
    import optax

    logits, masks = _logits(step, batch)
    goal = jax.nn.one_hot(masks, num_classes)
    errors = optax.softmax_cross_entropy(logits, optax.smooth_labels(goal, smoothing) if smoothing else goal)
    correct = jnp.argmax(logits, -1) == masks
    per_image = lambda x: jnp.mean(x, axis=(1, 2)) * step.valid
    return jnp.sum(per_image(errors)), {"pixel_accuracy": jnp.sum(per_image(correct))}


def _evaluate(step, batch):
    """Per class (C,): the test pixels of the class predicted as it, and those of it or predicted as it."""
    import jax.numpy as jnp

    logits, masks = _logits(step, batch)
    classes = jnp.arange(logits.shape[-1])
    predicted, truth = jnp.argmax(logits, -1)[..., None] == classes, masks[..., None] == classes
    real = step.valid[:, None, None, None] > 0
    count = lambda x: jnp.sum(x & real, axis=(0, 1, 2), dtype=jnp.int32)  # exact within a batch
    return {
        "intersection": count(predicted & truth),
        "union": count(predicted | truth),
        "pixels": jnp.sum(step.valid) * masks.shape[1] * masks.shape[2],
    }


def _logits(step, batch) -> tuple:
    """The model's logits and the masks, their pixels checked alike (shapes are static: found while tracing)."""
    from dali_launch.trainer.errors import UsageError

    logits, masks = step.model(batch["images"]), batch["masks"]
    if logits.shape[:3] != masks.shape:
        raise UsageError(
            f"--task segmentation: the model returns logits of {logits.shape[1:]} a sample for masks of "
            f"{masks.shape[1:]}; return per-pixel logits at the masks' height and width"
        )
    return logits, masks


def _summary(sums: dict) -> dict:
    """Mean IoU over the classes present in the test set or its predictions, and pixel accuracy."""
    import numpy as np

    intersection, union = np.asarray(sums["intersection"]), np.asarray(sums["union"])
    present = union > 0
    miou = float(np.mean(intersection[present] / union[present])) if present.any() else 0.0
    pixels = sums["pixels"]
    return {"miou": miou, "pixel_accuracy": float(intersection.sum() / pixels) if pixels else 0.0}


def _check_bounds(num_classes: int, low: dict, high: dict, split: str, pipeline: str) -> None:
    """Mask ids in 0..num_classes-1, or the one line that says which were not and the fix."""
    from dali_launch.trainer.errors import UsageError

    if high["masks"] >= num_classes:
        raise UsageError(
            f"--num-classes {num_classes} but --pipeline {pipeline} gave a {split} mask of class id {high['masks']}; "
            f"use --num-classes {high['masks'] + 1} or more"
        )
    if low["masks"] < 0:
        raise UsageError(
            f"--pipeline {pipeline} gave a {split} mask of class id {low['masks']}; masks hold class ids "
            f"0..{num_classes - 1}, so fix the masks it returns"
        )


def _check_model(num_classes: int, name: str, logits) -> None:
    """Per-pixel logits (1, H, W, --num-classes) for one sample, or the one line that says what the model returned."""
    from dali_launch.trainer.errors import UsageError

    shape = getattr(logits, "shape", None)
    if shape is None or len(shape) != 4 or shape[0] != 1 or shape[-1] != num_classes:
        said = shape if shape is not None else type(logits).__name__
        raise UsageError(
            f"--model {name} returns {said} for one sample, but --task segmentation takes per-pixel logits "
            f"(1, height, width, {num_classes}); use --model unet, or a model whose last layer is a "
            f"{num_classes}-wide convolution"
        )
