"""`--task detection`: boxes and classes of a variable number of objects an image, CenterNet's way.

    dali-launch data synth DATA --format detection --classes 3 --train 200 --test 60 --image-scale 0.15
    dali-launch train --task detection --data-dir DATA --num-classes 3 --image-size 64

Its pipeline (`--pipeline detection`, data/pipelines.py) gives `images`, `boxes` (MAX_OBJECTS, 4: relative left,
top, right, bottom), `classes` (MAX_OBJECTS,) and `counts` (how many of those rows are real objects); its
model (`--model centernet`, model/centernet.py) a dict of heads: a heatmap of centres per class, box sizes and
centre offsets on a grid of cells. The targets are rendered inside the step from the padded boxes
(tasks/centers.py): a Gaussian around each object's centre cell in its class's channel. The loss of an image is
the focal loss of the heatmap plus L1 of the size (weighted 0.1) and offset heads at the centres, over its
objects (at least one); the step sums it over real images.

Evaluation decodes each image's MAX_OBJECTS highest heatmap peaks into boxes and matches them greedily, in score
order, to the image's real objects of their class at IoU >= 0.5; it sums, at each score threshold of
THRESHOLDS, the true positives and the predictions, and the objects. The summary: recall, precision and F1 at
a score of SCORE, and `ap50`, the area under the precision-recall curve those thresholds trace (classes
pooled; coarser than COCO's 101-point AP50, and lower for it); the headline is ap50. Class ids outside
0..--num-classes - 1 stop the run in one line, as classification's labels do (the launcher's data check
refuses them in the built-in format before that).
"""

from __future__ import annotations

from functools import partial

from dali_launch.trainer.tasks.classification import bounded_class_ids
from dali_launch.trainer.tasks.contract import Task

THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(1, 20))  # 0.05 .. 0.95
SCORE = 0.3  # the score at which recall, precision and F1 are read: one of THRESHOLDS
HEADS = ("heatmap", "size", "offset")


def detection(num_classes: int = 10):
    """The task, for --num-classes classes (JAX is imported only where it runs)."""
    return Task(
        outputs=("images", "boxes", "classes", "counts"),
        loss=partial(_loss, num_classes=num_classes),
        evaluate=_evaluate,
        summary=summary,
        headline="ap50",
        better="higher",
        unit="images",
        pipeline="detection",
        model="centernet",
        metrics=("heatmap_loss", "box_loss"),
        bounds=bounded_class_ids("classes", num_classes, _classes),
        check_model=partial(_check_model, num_classes),
    )


def _valid(batch):
    """(images, MAX_OBJECTS): which rows of each image's boxes are real objects."""
    import jax.numpy as jnp

    rows = batch["classes"].shape[-1]
    return (jnp.arange(rows)[None, :] < batch["counts"].reshape(-1, 1)).astype(jnp.float32)


def _loss(step, batch, num_classes: int):
    import jax
    import jax.numpy as jnp

    from dali_launch.trainer.tasks import centers

    heads = step.model(batch["images"])
    valid, grid = _valid(batch), heads["heatmap"].shape[1:3]

    def image(heads, boxes, classes, valid):
        target = centers.heatmap(boxes, classes, valid, grid, num_classes)
        size, offset = centers.box_losses(heads["size"], heads["offset"], boxes, valid, grid)
        objects = jnp.maximum(valid.sum(), 1)
        return centers.focal(heads["heatmap"], target) / objects, (centers.SIZE_WEIGHT * size + offset) / objects

    heat, box = jax.vmap(image)(heads, batch["boxes"], batch["classes"], valid)
    heat, box = jnp.sum(heat * step.valid), jnp.sum(box * step.valid)
    return heat + box, {"heatmap_loss": heat, "box_loss": box}


def _evaluate(step, batch):
    import jax
    import jax.numpy as jnp

    from dali_launch.trainer.tasks import centers

    heads, valid = step.model(batch["images"]), _valid(batch)
    most = min(batch["classes"].shape[-1], heads["heatmap"][0].size)  # a tiny grid has fewer cells than that

    def image(heads, boxes, classes, valid):
        predicted, predicted_classes, scores = centers.peaks(heads, most)
        hits = centers.matched(predicted, predicted_classes, boxes, classes, valid)
        above = scores[None, :] >= jnp.array(THRESHOLDS)[:, None]  # (thresholds, predictions)
        return jnp.sum(above & hits[None, :], -1), jnp.sum(above, -1)

    hits, predicted = jax.vmap(image)(heads, batch["boxes"], batch["classes"], valid)
    real = step.valid[:, None]
    return {
        "true_positives": jnp.sum(hits * real, 0),
        "predictions": jnp.sum(predicted * real, 0),
        "objects": jnp.sum(valid.sum(-1) * step.valid),
    }


def summary(sums: dict) -> dict:
    """ap50, and recall, precision and F1 at SCORE, from the test set's sums (each threshold's true positives
    and predictions, the objects)."""
    import numpy as np

    hits, predicted = np.asarray(sums["true_positives"], float), np.asarray(sums["predictions"], float)
    recall = hits / max(float(sums["objects"]), 1.0)
    precision = np.divide(hits, predicted, out=np.zeros_like(hits), where=predicted > 0)
    at = THRESHOLDS.index(SCORE)
    r, p = float(recall[at]), float(precision[at])
    return {
        "ap50": _area(recall, precision, predicted > 0),
        "recall": r,
        "precision": p,
        "f1": 2 * r * p / (r + p) if r + p else 0.0,
    }


def _area(recall, precision, some) -> float:
    """The area under the precision-recall points of the thresholds that predicted something, precision made
    non-increasing in recall (VOC's envelope), from recall 0."""
    import numpy as np

    order = np.argsort(recall[some], kind="stable")
    r, p = recall[some][order], precision[some][order]
    envelope = np.maximum.accumulate(p[::-1])[::-1]
    return float(np.sum(np.diff(np.concatenate([[0.0], r])) * envelope))


def _classes(batch) -> dict:
    """The real objects' class ids (padding rows read as 0, in range whatever --num-classes), for the host's check."""
    import jax.numpy as jnp

    return {"classes": jnp.where(_valid(batch) > 0, batch["classes"], 0)}


def _check_model(num_classes: int, name: str, outputs) -> None:
    """A dict of the three heads on one grid, or the one line that says what the model returned."""
    from dali_launch.trainer.errors import UsageError

    shapes = {key: getattr(value, "shape", None) for key, value in outputs.items()} if isinstance(outputs, dict) else {}
    grid = (shapes.get("heatmap") or (None,) * 4)[:3]
    wanted = {"heatmap": (*grid, num_classes), "size": (*grid, 2), "offset": (*grid, 2)}
    if grid[0] == 1 and len(grid) == 3 and {key: shapes.get(key) for key in HEADS} == wanted:
        return
    given = shapes or getattr(outputs, "shape", type(outputs).__name__)
    raise UsageError(
        f"--model {name} returns {given} for one image, but --task detection takes a dict of heads on one grid: "
        f"heatmap (1, H, W, {num_classes}), size (1, H, W, 2), offset (1, H, W, 2); use --model centernet "
        f"(model/centernet.py)"
    )
