"""Built-in pipeline functions (`--pipeline NAME`); each meets the contract in contract.py.

mnist    the DALI + Flax example's: Caffe2 LMDB -> grey JPEG decode -> /255 -> flat 784 floats,
         one-hot labels for training, class ids for evaluation (DALI_extra's db/MNIST layout)
folders  JPEG class folders (SPLIT/<class>/<file>.jpg, classes numbered in sorted order, as
         `dali-launch data prepare --format folders` writes them) for real image sets:
         training: random resized crop + flip (+ --augment: augment.py); evaluation: resize + center crop;
         both: ImageNet mean/std normalisation, --image-size square RGB crops, HWC floats
tfrecord   the same images and augmentation from TFRecord shards of tf.Examples (image/encoded,
           image/class/label), SPLIT/*.tfrecord each with DALI's index SPLIT/*.idx
webdataset the same from WebDataset tar shards (NAME.jpg + NAME.cls), SPLIT/*.tar each with SPLIT/*.idx
           (`dali-launch data synth --format tfrecord|webdataset` writes both kinds)
detection  COCO splits (SPLIT/annotations.json beside the images, `data synth --format detection`) for
           --task detection: images resized to --image-size squares (training: flipped at random, the boxes
           with them), ImageNet mean/std, HWC floats; each image's boxes (relative left, top, right, bottom)
           and class ids padded to records/coco.py's MAX_OBJECTS, and how many are real
"""

from __future__ import annotations

from nvidia.dali import fn, types
from nvidia.dali import math as dmath
from nvidia.dali import tfrecord as tfrec

from dali_launch.trainer.data import formats
from dali_launch.trainer.data.contract import Pipeline, PipelineArgs
from dali_launch.trainer.data.formats import shard_files  # noqa: F401 - pipelines.shard_files for its users
from dali_launch.trainer.data.records import tfrecord as tfrecord_records
from dali_launch.trainer.data.records.coco import MAX_OBJECTS

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]  # ImageNet's, the usual start for a new image set
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
EVAL_RESIZE = 256 / 224  # resize the shorter side to this times the crop, then center-crop


def _mnist(args: PipelineArgs):
    jpegs, labels = inputs(args, "mnist")
    images = args.decode(jpegs, output_type=types.GRAY)
    if args.on_gpu:  # nvJPEG's images are on the GPU: both outputs stay there
        labels = labels.gpu()
    images = fn.crop_mirror_normalize(images, dtype=args.dtype(), std=[255.0], output_layout="CHW")
    images = fn.reshape(images, shape=[-1])
    labels = fn.one_hot(labels, num_classes=args.num_classes) if args.training else fn.reshape(labels, shape=[])
    return images, labels


mnist = Pipeline(_mnist, auto_decoder="cpu", cacheable=True)  # 28x28 JPEGs: the CPU decodes them faster than nvJPEG


def _folders(args: PipelineArgs):
    return imagenet_augment(*folders_inputs(args), args)


def _tfrecord(args: PipelineArgs):
    return imagenet_augment(*tfrecord_inputs(args), args)


def _webdataset(args: PipelineArgs):
    return imagenet_augment(*webdataset_inputs(args), args)


def _detection(args: PipelineArgs):
    """(images, boxes, classes, counts): what --task detection takes (tasks/detection.py). The boxes come
    relative to the image (DALI's `ratio`), so resizing leaves them as they are and a flip is `bb_flip`'s;
    class ids as the annotations give them (no remapping: 0..--num-classes - 1)."""
    formats.check_order("detection", "global" if args.feed is not None else "shards")
    jpegs, boxes, classes = inputs(args, "detection", ratio=True, ltrb=True, avoid_class_remapping=True)
    images = fn.resize(args.decode(jpegs, output_type=types.RGB), size=[args.image_size, args.image_size])
    mirror = fn.random.coin_flip(probability=0.5) if args.training else 0
    if args.training:
        boxes = fn.bb_flip(boxes, ltrb=True, horizontal=mirror)
    images = fn.crop_mirror_normalize(
        images, dtype=args.dtype(), mean=MEAN, std=STD, mirror=mirror, output_layout="HWC"
    )
    counts = dmath.min(classes.shape(dtype=types.INT32)[0], MAX_OBJECTS)
    objects = [_padded(boxes), _padded(classes), counts]
    return images, *(node.gpu() if args.on_gpu else node for node in objects)


def _padded(node):
    """The first MAX_OBJECTS rows of an image's objects, zero rows after the last: one shape for every image."""
    return fn.slice(node, start=[0], shape=[MAX_OBJECTS], axes=[0], out_of_bounds_policy="pad", fill_values=0)


detection = Pipeline(_detection, cacheable=True, whole_images=True)
folders = Pipeline(_folders, cacheable=True)
tfrecord = Pipeline(_tfrecord, cacheable=True)
webdataset = Pipeline(_webdataset, cacheable=True)


def inputs(args: PipelineArgs, name: str, **extra):
    """(encoded images, class ids) of one shard: format `name`'s reader, given the split's reader arguments
    from formats.py (those the launcher's pre-flight screen screens) and `extra` (DALI objects)."""
    found = formats.get(name)
    return args.read(found.reader, **found.reader_arguments(args.path), **extra, name=found.reader)


def folders_inputs(args: PipelineArgs):
    return inputs(args, "folders")


def tfrecord_inputs(args: PipelineArgs):
    features = {
        tfrecord_records.IMAGE: tfrec.FixedLenFeature((), tfrec.string, ""),
        tfrecord_records.LABEL: tfrec.FixedLenFeature([1], tfrec.int64, -1),
    }
    return inputs(args, "tfrecord", features=features)


def webdataset_inputs(args: PipelineArgs):
    return inputs(args, "webdataset")


def imagenet_augment(jpegs, labels, args: PipelineArgs):
    """The standard ImageNet input: training: random resized crop + flip; evaluation: resize + center
    crop; both: --image-size square RGB crops, ImageNet mean/std, HWC floats; labels as scalars."""
    size, decoder = args.image_size, args.decoder_args()
    crop = {"random_area": [0.08, 1.0], "random_aspect_ratio": [3 / 4, 4 / 3]}
    if args.training and args.keeps_decoded:  # whole images, decoded once (--decoded-cache), cropped every epoch
        images = fn.random_resized_crop(args.decode(jpegs, output_type=types.RGB), size=[size, size], **crop)
        images = args.auto_augment(images)  # --augment (augment.py)
        mirror = fn.random.coin_flip(probability=0.5)
    elif args.training:
        # Decoding only the random crop's region: cheaper than decoding whole images, on either device.
        images = fn.decoders.image_random_crop(jpegs, **decoder, output_type=types.RGB, **crop)
        images = args.auto_augment(fn.resize(images, size=[size, size]))  # --augment (augment.py)
        mirror = fn.random.coin_flip(probability=0.5)
    else:
        images = args.decode(jpegs, output_type=types.RGB)
        images = fn.resize(images, resize_shorter=round(size * EVAL_RESIZE))
        mirror = 0
    if args.on_gpu:
        images, labels = images.gpu(), labels.gpu()
    images = fn.crop_mirror_normalize(
        images, dtype=args.dtype(), crop=[size, size], mean=MEAN, std=STD, mirror=mirror, output_layout="HWC"
    )
    return images, fn.reshape(labels, shape=[])
