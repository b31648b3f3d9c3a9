"""CenterNet's arithmetic for tasks/detection.py, one image at a time (the task maps it over a batch): the
targets rendered from an image's padded boxes, the focal loss, the box losses at the centres, the heatmap's
peaks decoded into boxes, and those matched to the image's objects.

Boxes are (left, top, right, bottom) relative to the image, as the detection pipeline gives them; the heads
are on a grid of (h, w) cells. Object m is real where `valid[m]` (m < the image's count).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

SPREAD = 0.54  # TTFNet's: a box's Gaussian has sigma = SPREAD * side / 6 on each axis
LEAST_SIGMA = 0.25  # cells: a tiny box (or a padding row) still renders a finite peak
SIZE_WEIGHT = 0.1  # the paper's weight of the size loss (sizes in cells are a few units; offsets under 1)
IOU = 0.5  # a prediction is a true positive at this overlap with an unmatched object of its class


def centres(boxes, grid: tuple[int, int]):
    """Each box's centre (x, y) and size (width, height), in cells of a (h, w) grid; the cell holding its centre."""
    h, w = grid
    cells = boxes * jnp.array([w, h, w, h], jnp.float32)
    centre, size = (cells[:, :2] + cells[:, 2:]) / 2, cells[:, 2:] - cells[:, :2]
    cell = jnp.clip(jnp.floor(centre), 0, jnp.array([w - 1, h - 1])).astype(jnp.int32)
    return centre, size, cell


def heatmap(boxes, classes, valid, grid: tuple[int, int], num_classes: int):
    """The (h, w, num_classes) target: a Gaussian around each real object's centre cell (exactly 1 there), in its
    class's channel; where two overlap, the larger. A class id out of range renders nothing (the task's bounds
    stop the run on it)."""
    h, w = grid
    _, size, cell = centres(boxes, grid)
    sigma = jnp.maximum(SPREAD * size / 6, LEAST_SIGMA)
    gauss = lambda axis, n: jnp.exp(
        -((jnp.arange(n) - cell[:, axis : axis + 1]) ** 2) / (2 * sigma[:, axis : axis + 1] ** 2)
    )
    peaks = gauss(1, h)[:, :, None] * gauss(0, w)[:, None, :]  # (objects, h, w)
    owners = jax.nn.one_hot(classes, num_classes) * valid[:, None]  # (objects, classes)
    return jnp.max(peaks[..., None] * owners[:, None, None, :], axis=0)


def focal(logits, target):
    """CenterNet's penalty-reduced focal loss, summed over the cells: 1 marks a centre, the Gaussian around it
    lowers the penalty of predicting one nearby. log_sigmoid, not log(sigmoid): finite for any logit."""
    centre = target >= 1
    log_p, log_q = jax.nn.log_sigmoid(logits), jax.nn.log_sigmoid(-logits)
    p = jnp.exp(log_p)
    found = (1 - p) ** 2 * log_p
    spared = (1 - target) ** 4 * p**2 * log_q
    return -jnp.sum(jnp.where(centre, found, spared))


def box_losses(size_head, offset_head, boxes, valid, grid: tuple[int, int]):
    """L1 of the size and offset heads against each real object's, read at its centre cell, summed."""
    centre, size, cell = centres(boxes, grid)
    at = lambda head: head[cell[:, 1], cell[:, 0]]
    weight = valid[:, None]
    return jnp.sum(jnp.abs(at(size_head) - size) * weight), jnp.sum(jnp.abs(at(offset_head) - (centre - cell)) * weight)


def peaks(heads: dict, most: int):
    """The `most` highest local maxima of the heatmap (a 3x3 max-pool keeps a cell that is its neighbourhood's
    largest), as boxes (relative left, top, right, bottom), class ids and scores, highest first."""
    heat = jax.nn.sigmoid(heads["heatmap"])
    h, w, num_classes = heat.shape
    pooled = jax.lax.reduce_window(heat, -jnp.inf, jax.lax.max, (3, 3, 1), (1, 1, 1), "SAME")
    scores, index = jax.lax.top_k(jnp.where(heat == pooled, heat, 0).reshape(-1), most)
    classes, cells = index % num_classes, index // num_classes
    y, x = cells // w, cells % w
    centre = jnp.stack([x, y], -1) + heads["offset"][y, x]
    half = jnp.maximum(heads["size"][y, x], 0) / 2
    scale = jnp.array([w, h, w, h], jnp.float32)
    return jnp.concatenate([centre - half, centre + half], -1) / scale, classes, scores


def iou(a, b):
    """(len(a), len(b)) overlaps of two lists of boxes."""
    low, high = jnp.maximum(a[:, None, :2], b[None, :, :2]), jnp.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = jnp.prod(jnp.clip(high - low, 0), -1)
    area = lambda x: jnp.prod(jnp.clip(x[:, 2:] - x[:, :2], 0), -1)
    union = area(a)[:, None] + area(b)[None, :] - inter
    return inter / jnp.maximum(union, 1e-9)


def matched(predicted, predicted_classes, boxes, classes, valid):
    """Which predictions (in score order) are true positives: greedily, each takes the unmatched real object of
    its class it overlaps most, at IoU >= IOU. Greedy in score order, the predictions above any score threshold
    match as they would alone: one pass serves every threshold."""
    overlap = iou(predicted, boxes)
    allowed = (overlap >= IOU) & (predicted_classes[:, None] == classes[None, :]) & (valid[None, :] > 0)

    def one(taken, k):
        free = allowed[k] & ~taken
        best = jnp.argmax(jnp.where(free, overlap[k], -1.0))
        hit = free[best]
        return taken.at[best].set(taken[best] | hit), hit

    return jax.lax.scan(one, jnp.zeros(boxes.shape[0], bool), jnp.arange(predicted.shape[0]))[1]
