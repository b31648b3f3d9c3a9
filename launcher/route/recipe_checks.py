"""The pure checks of the vision recipe's flags: augmentation, mixing, the ViTs, fine-tuning.

Run by checks.validate before anything is written. Nothing heavy is imported: the ViTs are known by
their entry points, DALI's operation count and magnitude bins are constants here (tests/test_augment.py
holds them to DALI's and to model/vit.py's).
"""

from __future__ import annotations

from dali_launch.launcher.route.task_check import crops, flat
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.config import DataConfig, ModelConfig, TaskConfig
from dali_launch.trainer.data import formats
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model.registry import MODELS

RANDAUGMENT_OPS = 14  # DALI's RandAugment suite (augment.suite)
MAGNITUDE_BINS = 31  # augment.MAGNITUDE_BINS
PATCH = 16  # vit.PATCH


def is_vit(model: str) -> bool:
    return MODELS.get(model, "").startswith("dali_launch.trainer.model.vit:")


def validate(run: RunConfig) -> None:
    _augment(run.data, bool(run.launch.resume))
    _mixing(run.task, run.data)
    _vit(run.model, run.optimizer.layer_decay, run.data)
    if run.model.init_from is not None and not run.launch.resume:  # a resumed run starts from its checkpoint
        from dali_launch.trainer.model import init_from  # light: the checkpoint's files, without JAX

        init_from.locate(run.model.init_from)


def _augment(data: DataConfig, resumed: bool) -> None:
    try:
        n, m = data.randaugment_nm()
    except ValueError:
        raise UsageError(
            f"--randaugment {data.randaugment} is not N,M (two integers); e.g. --randaugment 2,9"
        ) from None
    if not (1 <= n <= RANDAUGMENT_OPS and 0 <= m < MAGNITUDE_BINS):
        raise UsageError(
            f"--randaugment {data.randaugment} is out of range: N (operations per image) must be 1 to "
            f"{RANDAUGMENT_OPS} and M (their magnitude) 0 to {MAGNITUDE_BINS - 1}; e.g. --randaugment 2,9"
        )
    if data.randaugment and data.augment != "randaugment" and not resumed:  # an earlier version recorded 2,9
        raise UsageError(
            f"--randaugment {data.randaugment} sets RandAugment's N,M, but --augment is {data.augment}; add "
            f"--augment randaugment, or leave --randaugment out"
        )
    if data.augment != "none" and flat(data.pipeline):
        augmented = [name for name in crops() if formats.get(name).augments]
        raise UsageError(
            f"--augment {data.augment} works on RGB crops (--pipeline {', '.join(augmented)} or your own); "
            f"--pipeline {data.pipeline} gives flat grey digits; use --augment none"
        )
    found = formats.get(data.pipeline)
    if data.augment != "none" and found is not None and not found.augments:
        why = found.no_augment.format(pipeline=data.pipeline)
        raise UsageError(f"--augment {data.augment} {why}; use --augment none")


def _mixing(recipe: TaskConfig, data: DataConfig) -> None:
    for name in ("mixup", "cutmix"):
        if not getattr(recipe, name) >= 0:
            raise UsageError(
                f"--{name} {getattr(recipe, name)} must be 0 (off) or more: it is Beta's alpha (0.2 to 1 are usual)"
            )
    if recipe.cutmix and flat(data.pipeline):
        raise UsageError(
            f"--cutmix pastes boxes of HWC images, but --pipeline {data.pipeline} gives flat vectors; use --mixup, "
            "or an image pipeline"
        )


def _vit(model: ModelConfig, layer_decay: float, data: DataConfig) -> None:
    if not 0 <= model.drop_path < 1:
        raise UsageError(f"--drop-path {model.drop_path} is out of range; use a value in [0, 1)")
    if not 0 < layer_decay <= 1:
        raise UsageError(f"--layer-decay {layer_decay} is out of range; use a value in (0, 1] (1: off)")
    builtin, vit = model.model in MODELS, is_vit(model.model)
    offs = (
        ("drop_path", model.drop_path, 0.0),
        ("layer_decay", layer_decay, 1.0),
        ("remat", model.remat, "auto"),  # auto: none where the model has no blocks
    )
    for name, value, off in offs:
        if builtin and not vit and value not in (off, "none"):
            flag = f"--{name.replace('_', '-')}"
            raise UsageError(
                f"{flag} is for the ViTs' blocks (--model {', '.join(m for m in MODELS if is_vit(m))}); "
                f"--model {model.model} has none: leave {flag} out"
            )
    if model.attention.startswith("cudnn") and model.precision != "bf16":
        raise UsageError(
            f"--attention {model.attention} runs cuDNN's 16-bit kernels, but --precision is {model.precision}; add "
            f"--precision bf16, or use --attention auto"
        )
    if vit and flat(data.pipeline):
        raise UsageError(
            f"--model {model.model} cuts images into {PATCH}×{PATCH} patches, but --pipeline {data.pipeline} gives 28×28 "
            f"digits; use an image pipeline (--pipeline folders, ...) with an --image-size divisible by {PATCH}"
        )
    if vit and data.pipeline in crops() and data.image_size % PATCH:
        fit = max(PATCH, data.image_size // PATCH * PATCH)
        raise UsageError(
            f"--image-size {data.image_size} is not divisible by {model.model}'s {PATCH}-pixel patches; use a "
            f"multiple of {PATCH}, e.g. {fit}"
        )
