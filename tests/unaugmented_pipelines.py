"""Pipelines for the tests, found through PYTHONPATH=tests: a built-in format's reader (its sharding,
shuffling and padding, as --pipeline tfrecord|webdataset|folders|segmentation read) with the deterministic
evaluation path of its augmentation, so the fingerprints --record-samples writes can be compared with a
reference read of the whole split."""

from __future__ import annotations

from dataclasses import replace

from dali_launch.trainer.data import pipelines
from dali_launch.trainer.data import segmentation as masked


def _unaugmented(inputs):
    return lambda args: pipelines.imagenet_augment(*inputs(args), replace(args, training=False))


tfrecord = _unaugmented(pipelines.tfrecord_inputs)
webdataset = _unaugmented(pipelines.webdataset_inputs)
folders = _unaugmented(pipelines.folders_inputs)


def segmentation(args):
    return masked.images_and_masks(*masked.segmentation_inputs(args), replace(args, training=False))
