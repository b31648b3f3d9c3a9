"""`--task video`: clips of T frames and their class, softmax cross-entropy, accuracy over clips and over videos.

The pipeline gives `clips` and `labels` (`--pipeline video` and `--model st-cnn` are the task's own): in training
one clip a video, (T, H, W, C); in evaluation --eval-clips evenly spaced clips of each test video, (K, T, H, W,
C). A model maps (batch, T, H, W, C) to logits (batch, --num-classes). The loss is the cross-entropy of each
training clip (smoothed by --label-smoothing), summed over the real samples. Evaluation scores all K clips of a
video in one forward pass: `clip_accuracy` is the share of test clips whose largest logit is their video's
class, `accuracy` (the headline) the share of test videos whose clips' averaged logits are. Class ids out of
range stop the run in one line, as classification's do.
"""

from __future__ import annotations

from functools import partial

from dali_launch.trainer.tasks.classification import bounded_class_ids
from dali_launch.trainer.tasks.contract import Task


def video(num_classes: int = 10, label_smoothing: float = 0.0, mixup: float = 0.0, cutmix: float = 0.0):
    """The task for --num-classes classes; --mixup and --cutmix (which mix images) are refused."""
    if mixup or cutmix:
        from dali_launch.trainer.errors import UsageError

        given = " and ".join(f"--{name} {value}" for name, value in (("mixup", mixup), ("cutmix", cutmix)) if value)
        raise UsageError(f"{given}: mixing is for images; --task video takes none, leave it out")
    return Task(
        outputs=("clips", "labels"),
        loss=partial(_loss, num_classes=num_classes, smoothing=label_smoothing),
        evaluate=_evaluate,
        headline="accuracy",
        unit="videos",
        pipeline="video",
        model="st-cnn",
        metrics=("accuracy",),
        bounds=bounded_class_ids("labels", num_classes, lambda batch: {"labels": _labels(batch)}),
        check_model=partial(_check_model, num_classes),
    )


def _loss(step, batch, num_classes: int, smoothing: float):
    import jax
    import jax.numpy as jnp
    import optax

    logits, labels = step.model(batch["clips"]), _labels(batch)
    goal = jax.nn.one_hot(labels, num_classes)
    errors = optax.softmax_cross_entropy(logits, optax.smooth_labels(goal, smoothing) if smoothing else goal)
    correct = jnp.argmax(logits, -1) == labels
    return jnp.sum(errors * step.valid), {"accuracy": jnp.sum(correct * step.valid)}


def _evaluate(step, batch):
    """Each video's K clips through the model at once; its clips' hits (as a share of K) and its own."""
    import jax.numpy as jnp

    clips, labels = batch["clips"], _labels(batch)
    if clips.ndim == 5:  # one clip a video: a pipeline of one's own evaluating as it trains
        clips = clips[:, None]
    videos, count = clips.shape[:2]
    logits = step.model(clips.reshape(videos * count, *clips.shape[2:])).reshape(videos, count, -1)
    hits = jnp.mean(jnp.argmax(logits, -1) == labels[:, None], axis=1)
    return {
        "accuracy": jnp.sum((jnp.argmax(jnp.mean(logits, axis=1), -1) == labels) * step.valid),
        "clip_accuracy": jnp.sum(hits * step.valid),
    }


def _labels(batch):
    labels = batch["labels"]
    return labels.reshape(labels.shape[0])


def _check_model(num_classes: int, name: str, logits) -> None:
    """Logits (1, --num-classes) for one clip, or the one line that says what the model returned."""
    from dali_launch.trainer.model.contract import width_error

    if getattr(logits, "shape", None) != (1, num_classes):
        raise width_error(name, getattr(logits, "shape", type(logits).__name__), num_classes)
