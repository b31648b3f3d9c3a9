"""The optimizer and its learning-rate schedule, from the [optimizer] settings, through optax.

The transformation is built with a learning rate of 1 and the step multiplies its update by
`schedule(update)`: every optimizer here ends by scaling with the rate (optax's sgd, adamw, lamb
and lars all do), so this is the same update, and the schedule can count the data's steps rather
than optax's own count, which stands still on padding-only steps (parallel.py). An epoch has
`slots_per_epoch` = DeviceBatches.steps device calls × --steps-per-call SGD steps, and
--accumulate-steps of them make one optimizer update.
"""

from __future__ import annotations

import jax
import optax

from dali_launch.trainer.config import OptimizerConfig
from dali_launch.trainer.step import layer_decay


def decay_mask(params):
    """True for the parameters weight decay applies to: kernels (2 or more dimensions), not biases
    or normalisation scales and offsets (1 dimension), as in Goyal et al. 2017 and timm."""
    return jax.tree.map(lambda p: p.ndim > 1, params)


def optimizer(train: OptimizerConfig) -> optax.GradientTransformation:
    """--optimizer with --momentum, --weight-decay, --clip-norm and --layer-decay, at a learning rate of 1."""
    wd, name = train.weight_decay, train.optimizer
    if name in ("sgd", "nesterov"):
        tx = optax.sgd(1.0, momentum=train.momentum or None, nesterov=name == "nesterov")
        if wd:  # L2 added to the gradient before momentum, as torch.optim.SGD's weight_decay
            tx = optax.chain(optax.add_decayed_weights(wd, decay_mask), tx)
    elif name == "adamw":
        tx = optax.adamw(1.0, weight_decay=wd, mask=decay_mask)
    elif name == "lamb":
        tx = optax.lamb(1.0, weight_decay=wd, mask=decay_mask)
    else:  # lars: no trust ratio for biases and scales either (You et al. 2017)
        tx = optax.lars(
            1.0, weight_decay=wd, weight_decay_mask=decay_mask, trust_ratio_mask=decay_mask, momentum=train.momentum
        )
    if train.clip_norm:
        tx = optax.chain(optax.clip_by_global_norm(train.clip_norm), tx)
    if train.layer_decay != 1.0:
        tx = optax.chain(tx, layer_decay.scale_by_layer(train.layer_decay))
    return tx


def schedule(train: OptimizerConfig, epochs: int, slots_per_epoch: int, lr_scale: float = 1.0) -> optax.Schedule:
    """The learning rate of optimizer update `n` (0-based), for `epochs` (--epochs) of `slots_per_epoch` SGD steps,
    --learning-rate scaled by `lr_scale` (the plan's: elastic.py's rescale rule)."""
    per_epoch = slots_per_epoch / train.accumulate_steps  # optimizer updates per epoch
    total = max(1, round(epochs * per_epoch))
    warmup = train.warmup_steps or round(train.warmup_epochs * per_epoch)
    warmup = min(warmup, total - 1)
    lr, after = train.learning_rate * lr_scale, total - warmup
    if train.schedule == "cosine":
        decay = optax.cosine_decay_schedule(lr, after)
    elif train.schedule == "linear":
        decay = optax.linear_schedule(lr, 0.0, after)
    elif train.schedule == "step":
        decay = optax.piecewise_constant_schedule(
            lr, {round(e * per_epoch) - warmup: train.decay_factor for e in train.decay_epoch_list()}
        )
    else:
        decay = optax.constant_schedule(lr)
    if not warmup:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), decay], [warmup])
