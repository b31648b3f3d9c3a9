"""--layer-decay: layer-wise learning-rate decay for the ViTs (BEiT, DeiT III, timm's `layer_decay`).

Layer l of L = depth + 1 (model/vit.py's `layers_of`: 0 the embeddings, block i the layer i + 1, the
final norm and the head L) gets the rate × decay^(L - l). As timm's per-group `lr_scale`, the factor
scales the whole update, so AdamW's decoupled weight decay of that layer is scaled with it. It is a
transformation after the optimizer's own; the schedule's rate multiplies its output (optim.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dali_launch.trainer.model.vit import layers_of

BLOCKS = ("Transformer", "encoderblock")  # the ViTs' stacked block parameters: their first axis is the depth


def names(path) -> tuple[str, ...]:
    return tuple(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def depth_of(tree) -> int:
    """The blocks in a ViT's parameters (the length of their stacked axis); 0 for any other model."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return next((leaf.shape[0] for path, leaf in leaves if names(path)[:2] == BLOCKS), 0)


def scales(tree, decay: float):
    """The factor of every parameter, shaped to broadcast against it (per block along the stacked axis)."""
    depth = depth_of(tree)

    def scale(path, leaf):
        layer = np.asarray(layers_of(names(path), depth), np.float32)
        factor = np.float32(decay) ** (depth + 1 - layer)
        return jnp.asarray(factor.reshape(factor.shape + (1,) * (leaf.ndim - factor.ndim)))

    return jax.tree_util.tree_map_with_path(scale, tree)


def scale_by_layer(decay: float) -> optax.GradientTransformation:
    def update(updates, state, params=None):
        factors = scales(updates, decay)  # constants of the program: only the tree's paths and shapes decide
        return jax.tree.map(lambda u, f: u * f.astype(u.dtype), updates, factors), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)
