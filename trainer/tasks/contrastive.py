"""`--task contrastive`: SimCLR's self-supervised learning (Chen et al. 2020), with an online linear probe.

    dali-launch data synth DIR --format folders --classes 4
    dali-launch train --task contrastive --data-dir DIR --num-classes 4

Its pipeline (`--pipeline views`, data/views.py) gives two augmented views of each training image and its
class; its model (`--model simclr-cnn`, model/contrastive.py) a dict with the `projection` the loss compares
and the `probe`'s logits, read from the encoder's features with their gradient stopped.
The loss of a step is NT-Xent over the job's whole batch: each view's positive is the other view of its image,
its negatives every other view of every device of every process (`step.gather`: under --parallel pmap each
device holds its own rows), padding neither anchor nor negative; cosine similarities over TEMPERATURE.
The probe's cross-entropy against the labels is added (its gradient reaches the probe alone) and both are
training metrics, with the share of views whose most similar other view is their positive (`pair_accuracy`).
The test set is scored by the probe's top-1 accuracy (a linear-probe evaluation, on the centre view).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from dali_launch.trainer.tasks.classification import bounded_class_ids
from dali_launch.trainer.tasks.contract import Task

TEMPERATURE = 0.5  # SimCLR's for CIFAR-10-sized batches (its ImageNet runs, at batch 4096, took 0.1)
MASKED = -1e9  # a similarity no pair has: exp() of it is 0, and no inf meets a gradient


def contrastive(num_classes: int = 10, temperature: float = TEMPERATURE):
    """The task, its probe over --num-classes classes (JAX is imported only where it runs)."""
    return Task(
        outputs=("view1", "view2", "labels"),
        loss=partial(_loss, temperature=temperature),
        evaluate=_evaluate,
        headline="probe_accuracy",
        better="higher",
        inputs="view1",
        unit="images",
        pipeline="views",
        model="simclr-cnn",
        metrics=("contrastive", "probe_loss", "pair_accuracy"),
        # class ids out of range would be a probe row of zeros, its loss silently 0 (jax.nn.one_hot)
        bounds=bounded_class_ids("labels", num_classes, _labels),
        check_model=partial(_check_model, num_classes),
    )


def _loss(step, batch, temperature: float):
    import jax.numpy as jnp
    import optax

    from dali_launch.trainer.data.contract import class_ids

    # One forward pass over both views: one program, and GroupNorm's statistics are a sample's own anyway
    outputs = step.model(jnp.concatenate([batch["view1"], batch["view2"]]))
    contrastive, pairs = nt_xent(step, outputs["projection"], temperature)
    labels = jnp.tile(class_ids(batch["labels"]), 2)
    probe = optax.softmax_cross_entropy_with_integer_labels(outputs["probe"], labels)
    probe_loss = jnp.sum(_per_sample(probe) * step.valid)
    return contrastive + probe_loss, {"contrastive": contrastive, "probe_loss": probe_loss, "pair_accuracy": pairs}


def nt_xent(step, projection, temperature: float):
    """NT-Xent summed over this device's real samples (each the mean of its two views' losses) and the count of
    views whose nearest other view is their positive, halved likewise. `projection`: (2n, d), this device's
    first views, then their second views."""
    import jax
    import jax.numpy as jnp

    z = projection / jnp.maximum(jnp.linalg.norm(projection, axis=-1, keepdims=True), 1e-12)
    rows, half = z.shape[0], z.shape[0] // 2
    first, second, valid = step.gather(z[:half]), step.gather(z[half:]), step.gather(step.valid)
    job = first.shape[0]  # the job's samples; this device's are rows 0..half-1 of each view
    similarity = z @ jnp.concatenate([first, second]).T / temperature  # (2n, 2N)
    anchor = jnp.arange(rows)
    itself = jnp.where(anchor < half, anchor, anchor - half + job)
    positive = jnp.where(anchor < half, anchor + job, anchor - half)
    column = jnp.arange(2 * job)
    usable = (jnp.tile(valid, 2)[None, :] > 0) & (column[None, :] != itself[:, None])  # padding: no negative
    similarity = jnp.where(usable, similarity, MASKED)
    loss = jax.nn.logsumexp(similarity, axis=1) - similarity[anchor, positive]
    found = (jnp.argmax(similarity, axis=1) == positive).astype(jnp.float32)
    real = step.valid > 0  # padding: no anchor (where, not a product: a padded anchor's loss is huge)
    return jnp.sum(jnp.where(real, _per_sample(loss), 0.0)), jnp.sum(jnp.where(real, _per_sample(found), 0.0))


def _per_sample(x):
    """(2n,) values of both views -> (n,) means of each sample's two."""
    half = x.shape[0] // 2
    return (x[:half] + x[half:]) / 2


def _evaluate(step, batch):
    import jax.numpy as jnp

    from dali_launch.trainer.data.contract import class_ids

    predicted = jnp.argmax(step.model(batch["view1"])["probe"], -1)
    return {"probe_accuracy": jnp.sum((predicted == class_ids(batch["labels"])) * step.valid)}


def _labels(batch) -> dict:
    from dali_launch.trainer.data.contract import class_ids

    return {"labels": class_ids(batch["labels"])}


def _check_model(num_classes: int, name: str, outputs) -> None:
    """A dict with `projection` (1, any width) and `probe` (1, --num-classes) for one sample, or one line."""
    from dali_launch.trainer.errors import UsageError

    shape = lambda key: tuple(getattr(outputs.get(key), "shape", ())) if isinstance(outputs, Mapping) else ()
    if len(shape("projection")) == 2 and shape("projection")[0] == 1 and shape("probe") == (1, num_classes):
        return
    raise UsageError(
        f"--model {name} returns {_described(outputs)} for one sample, but --task contrastive needs a dict with "
        f"'projection' (1, any width: what the loss compares) and 'probe' (1, {num_classes}: a linear probe's "
        f"logits on features whose gradient is stopped); use --model simclr-cnn, or return both"
    )


def _described(outputs) -> str:
    if isinstance(outputs, Mapping):
        return "{" + ", ".join(f"{k!r}: {tuple(getattr(v, 'shape', ()))}" for k, v in outputs.items()) + "}"
    return f"an array of shape {tuple(getattr(outputs, 'shape', ()))}"
