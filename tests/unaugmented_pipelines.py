"""Pipelines for the tests, found through PYTHONPATH=tests: a built-in format's reader (its sharding,
shuffling and padding, as --pipeline tfrecord|webdataset|folders|segmentation|audio read) with the deterministic
evaluation path of its augmentation, so the fingerprints --record-samples writes can be compared with a
reference read of the whole split; and the contrastive task's views without their randomness."""

from __future__ import annotations

from dataclasses import replace

from nvidia.dali import fn, types

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
    """--pipeline video's training reader (its windows, shards, shuffle and padding) with each window's first T
    frames, whole: one clip a window, the same on any device of any layout, in either split."""
    from dali_launch.trainer.data import video as clips

    frames, labels, _ = clips.windows(clips.screened(args), args)
    first = fn.slice(frames, start=[0], shape=[args.clip_frames], axes=[0])
    first = fn.resize(first, size=[args.image_size] * 2, interp_type=types.INTERP_LINEAR)
    first = fn.crop_mirror_normalize(
        first, dtype=args.dtype(), mean=pipelines.MEAN, std=pipelines.STD, output_layout="FHWC"
    )
    return first, fn.reshape(labels, shape=[])


def audio(args):
    """--pipeline audio as it evaluates: each sound's centred clip, no masks."""
    encoded, labels = sounds.audio_inputs(args)
    return sounds.log_mel(encoded, replace(args, training=False)), fn.reshape(labels, shape=[])
