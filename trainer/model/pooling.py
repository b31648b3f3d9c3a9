"""The ImageNet stem's 3x3 stride-2 max pool, with a gradient that needs no scatter (`--pool-grad masks`).

JAX differentiates reduce_window's max through select_and_scatter. Under XLA's deterministic ops
(--deterministic) XLA:GPU rewrites that scatter into a sort-like form, which was nearly all of the flag's
cost on ResNet-50 (docs/resilience.md, `--deterministic`). Here the gradient is built from the nine window offsets instead: for each offset, in row-major
order, the positions where the window's maximum sits and no earlier offset matched (select_and_scatter's
`ge` keeps the first maximum too), times the upstream gradient, spread back by stride 2 with lax.pad.
Slices, compares, selects, pads and adds in a fixed order: deterministic without any flag.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

WINDOW, STRIDE = 3, 2


def _pads(size: int) -> tuple[int, int]:
    """SAME padding of one side for a WINDOW-wide window at STRIDE, as nn.max_pool's padding="SAME"."""
    return lax.padtype_to_pads((size,), (WINDOW,), (STRIDE,), "SAME")[0]


def _padded(x):
    """`x` padded with -inf (max's identity) on its two spatial axes, and the pads used."""
    pads = (_pads(x.shape[1]), _pads(x.shape[2]))
    low = jnp.array(-jnp.inf, x.dtype)
    return lax.pad(x, low, ((0, 0, 0), (*pads[0], 0), (*pads[1], 0), (0, 0, 0))), pads


def _window(xp, di: int, dj: int, out_h: int, out_w: int):
    """The element at offset (di, dj) of every window: a strided slice of the padded input."""
    n, _, _, c = xp.shape
    end = (n, di + STRIDE * (out_h - 1) + 1, dj + STRIDE * (out_w - 1) + 1, c)
    return lax.slice(xp, (0, di, dj, 0), end, (1, STRIDE, STRIDE, 1))


def _forward(x):
    # The identity as a Python float, as flax's pooling passes it: JAX then recognises the max monoid and
    # differentiates through select_and_scatter. A jnp.array here is a tracer under jit, the reduction a
    # generic one, and its gradient "Linearization failed" (--pool-grad scatter broke that way).
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, WINDOW, WINDOW, 1), (1, STRIDE, STRIDE, 1), "SAME")


@jax.custom_vjp
def max_pool_3x3_s2(x):
    """nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME") on NHWC input; its gradient by offset masks."""
    return _forward(x)


def _fwd(x):
    y = _forward(x)
    return y, (x, y)


def _bwd(saved, g):
    x, y = saved
    xp, pads = _padded(x)
    out_h, out_w = y.shape[1], y.shape[2]
    zero = jnp.zeros((), g.dtype)
    taken = jnp.zeros(y.shape, bool)
    grad = jnp.zeros(xp.shape, g.dtype)
    for di in range(WINDOW):
        for dj in range(WINDOW):
            hit = (_window(xp, di, dj, out_h, out_w) == y) & ~taken
            taken = taken | hit
            grad = grad + _spread(jnp.where(hit, g, zero), xp.shape, di, dj)
    (top, _), (left, _) = pads
    return (grad[:, top : top + x.shape[1], left : left + x.shape[2]],)


def _spread(values, shape, di: int, dj: int):
    """`values` (one per window) placed at rows di + STRIDE·i and columns dj + STRIDE·j of `shape`, zeros elsewhere."""
    _, out_h, out_w, _ = values.shape
    high_h = shape[1] - di - (STRIDE * (out_h - 1) + 1)
    high_w = shape[2] - dj - (STRIDE * (out_w - 1) + 1)
    config = ((0, 0, 0), (di, high_h, STRIDE - 1), (dj, high_w, STRIDE - 1), (0, 0, 0))
    return lax.pad(values, jnp.zeros((), values.dtype), config)


max_pool_3x3_s2.defvjp(_fwd, _bwd)


def stem_pool(x, grad: str):
    """The stem's 3x3/2 max pool; `grad` (--pool-grad resolved): scatter (JAX's own) or masks (above)."""
    if grad == "masks":
        return max_pool_3x3_s2(x)
    return _forward(x)
