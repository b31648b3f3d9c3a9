"""A --pipeline of the user's own with a Python operator, which --deterministic refuses (test_catalogue_other.py)."""

from __future__ import annotations

import numpy as np
from nvidia.dali import fn, types


def noisy(args):
    """The mnist pipeline with noise from numpy's global generator: neither seeded nor checkpointed by DALI."""
    jpegs, labels = args.read("caffe2", path=args.path)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
    images = fn.python_function(images, function=lambda x: x + np.random.randint(0, 2, x.shape, x.dtype))
    images = fn.reshape(fn.cast(images, dtype=types.FLOAT), shape=[-1])
    return images, fn.one_hot(labels, num_classes=args.num_classes) if args.training else fn.reshape(labels, shape=[])
