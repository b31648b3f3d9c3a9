"""The training task (its outputs, loss, metrics and evaluation: tasks/contract.py), and the classification task's
options: label smoothing, mixup and CutMix.

The [task] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class TaskConfig:
    task: str = opt(
        "classification",
        "classification, segmentation, detection, contrastive, or package.module:name.",
        details=(
            "The training task: classification (images and class labels, cross-entropy, top-1 accuracy), "
            "segmentation (images and masks, per-pixel cross-entropy, mean IoU), detection, contrastive, or "
            "package.module:name of your own (a Task or its factory: docs/tasks.md). It names the pipeline's "
            "outputs, the loss, the metrics and the evaluation."
        ),
    )
    label_smoothing: float = opt(
        0.0,
        "Classification and segmentation: label smoothing.",
        details="Classification and segmentation: the one-hot targets mixed with this much of a uniform one.",
    )
    mixup: float = opt(
        0.0,
        "Mixup's alpha (0: off).",
        details=(
            "Mixup's alpha: each device's batch is mixed with itself reversed, by a weight from Beta(alpha, alpha) "
            "per batch, targets too (timm's Mixup; 0: off). With --cutmix, each batch takes one of the two at even odds."
        ),
    )
    cutmix: float = opt(
        0.0,
        "CutMix's alpha (0: off).",
        details=(
            "CutMix's alpha: a box of each device's batch is pasted from the batch reversed, its area from "
            "Beta(alpha, alpha) per batch; the targets' weights are the areas (0: off)."
        ),
    )
