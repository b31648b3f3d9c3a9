"""Pipelines for the tests, found through PYTHONPATH=tests: a built-in format's reader (its sharding,
shuffling and padding, as --pipeline tfrecord|webdataset|folders|segmentation|audio read) with the deterministic
evaluation path of its augmentation, so the fingerprints --record-samples writes can be compared with a
reference read of the whole split; and the contrastive task's views without their randomness."""

from __future__ import annotations

from dataclasses import replace

from nvidia.dali import fn

from dali_launch.trainer.data import audio as sounds
from dali_launch.trainer.data import pipelines
from dali_launch.trainer.data import segmentation as masked
from dali_launch.trainer.data import views as contrastive_views


def _unaugmented(inputs):
    return lambda args: pipelines.imagenet_augment(*inputs(args), replace(args, training=False))


tfrecord = _unaugmented(pipelines.tfrecord_inputs)
webdataset = _unaugmented(pipelines.webdataset_inputs)
folders = _unaugmented(pipelines.folders_inputs)


def segmentation(args):
    return masked.images_and_masks(*masked.segmentation_inputs(args), replace(args, training=False))


def views(args):
    """--pipeline views as it evaluates (the centre crop), its second view that crop mirrored: the same views of
    a sample on any device of any layout, where DALI's random operators draw per shard."""
    view, _, labels = contrastive_views.views(replace(args, training=False))
    return view, fn.flip(view, horizontal=1), labels


def video(args):
    """--pipeline video's reader (its shards, shuffle and padding) with its first T frames, whole: one clip a
    file, the same on any device of any layout."""
    from dali_launch.trainer.data import video as clips

    kwargs, window = clips.screened(args)
    frames, labels = clips.reader(kwargs, window, args)
    first = clips.evaluation(frames, window, replace(args, eval_clips=1))
    return fn.squeeze(first, axes=[0]), fn.reshape(labels, shape=[])


def audio(args):
    """--pipeline audio as it evaluates: each sound's centred clip, no masks."""
    encoded, labels = sounds.audio_inputs(args)
    return sounds.log_mel(encoded, replace(args, training=False)), fn.reshape(labels, shape=[])
