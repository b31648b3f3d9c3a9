"""The optimizer and its schedule: the update rule, the learning rate over time, clipping, accumulation, EMA.

The [optimizer] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class OptimizerConfig:
    optimizer: str = opt(
        "sgd",
        "sgd, nesterov, adamw, lamb, or lars (optax).",
        details=(
            "sgd (with --momentum; 0: plain SGD), nesterov (SGD with Nesterov momentum), adamw, lamb, or lars "
            "(LARS with --momentum). Through optax."
        ),
        choices=("sgd", "nesterov", "adamw", "lamb", "lars"),
    )
    learning_rate: float = opt(0.1, "Peak learning rate (after warm-up).")
    momentum: float = opt(
        0.9,
        "Momentum of sgd, nesterov and lars.",
        details="Momentum of sgd, nesterov and lars (adamw and lamb: optax's b1 0.9, b2 0.999).",
    )
    schedule: str = opt(
        "constant",
        "After warm-up: constant, cosine, linear, or step.",
        details=(
            "Learning-rate schedule after the warm-up: constant, cosine (to 0 at the end of training), linear "
            "(to 0 at the end), or step (times --decay-factor at each of --decay-epochs)."
        ),
        choices=("constant", "cosine", "linear", "step"),
    )
    warmup_epochs: float = opt(
        0.0,
        "Linear warm-up over this many epochs (a fraction too).",
        details="Linear warm-up from 0 to --learning-rate over this many epochs (may be a fraction).",
    )
    warmup_steps: int = opt(
        0,
        "Linear warm-up over this many optimizer steps instead.",
        details="Linear warm-up over this many optimizer steps instead of --warmup-epochs.",
    )
    decay_epochs: str = opt(
        "",
        "--schedule step: epochs at which the rate drops, e.g. 30,60,80.",
        details=(
            "--schedule step: the epochs at which the rate is multiplied by --decay-factor, "
            "comma-separated, e.g. 30,60,80."
        ),
    )
    decay_factor: float = opt(
        0.1,
        "--schedule step: the factor at each of --decay-epochs.",
        details="--schedule step: the factor applied at each of --decay-epochs.",
    )
    weight_decay: float = opt(
        0.0,
        "Weight decay of kernels (not biases or norms).",
        details=(
            "Weight decay of kernels (parameters of 2 or more dimensions; biases and normalisation scales are "
            "left alone): added to the gradient for sgd/nesterov/lars, decoupled for adamw/lamb."
        ),
    )
    clip_norm: float = opt(
        0.0,
        "Clip the job-wide gradient to this global norm (0: off).",
        details="Clip the job-wide gradient to this global norm (0: no clipping).",
    )
    accumulate_steps: int = opt(
        1,
        "Accumulate gradients over this many steps per update.",
        details=(
            "Accumulate gradients over this many steps of --batch-size before one optimizer update: exactly one "
            "step of a batch this many times larger (the loss stays the mean over every real sample)."
        ),
    )
    ema_decay: float = opt(
        0.0,
        "Keep an exponential moving average of the parameters (0: off).",
        details=(
            "Keep an exponential moving average of the parameters (and BatchNorm statistics) "
            "with this decay per optimizer update, e.g. 0.999 (0: none)."
        ),
    )
    layer_decay: float = opt(
        1.0,
        "ViTs: layer-wise learning-rate decay (1: off).",
        details=(
            "ViTs: layer-wise learning-rate decay (BEiT, DeiT III): block i of D gets the rate × decay^(D - i), the "
            "embeddings decay^(D + 1), the head and final norm the rate itself (1: off)."
        ),
    )

    def decay_epoch_list(self) -> list[int]:
        """--decay-epochs as integers ("30,60" -> [30, 60]); raises ValueError on anything else."""
        return [int(e) for e in self.decay_epochs.replace(" ", "").split(",") if e]
