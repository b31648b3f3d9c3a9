"""What the step does to a batch and its targets: label smoothing, mixup and CutMix.

The [recipe] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class RecipeConfig:
    label_smoothing: float = opt(0.0, "Label smoothing: the one-hot targets mixed with this much of a uniform one.")
    mixup: float = opt(
        0.0,
        "Mixup's alpha: each device's batch is mixed with itself reversed, by a weight from Beta(alpha, alpha) "
        "per batch, targets too (timm's Mixup; 0: off). With --cutmix, each batch takes one of the two at even odds.",
    )
    cutmix: float = opt(
        0.0,
        "CutMix's alpha: a box of each device's batch is pasted from the batch reversed, its area from "
        "Beta(alpha, alpha) per batch; the targets' weights are the areas (0: off).",
    )
