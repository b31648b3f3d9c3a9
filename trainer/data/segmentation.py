"""`--pipeline segmentation`: images and their masks of class ids, for `--task segmentation`.

It reads WebDataset shards of NAME.jpg + NAME.png (`dali-launch data synth --format segmentation`) through
`args.read`, in either --sample-order, bad images screened as every built-in's are. The mask is decoded as
one grey channel (its class ids as they are) and only ever resized nearest-neighbour: no pixel gets a class
that lies between two others.

training    one random window (each side 50-100 % of the image's, anywhere in it) and one coin's horizontal
            flip, the same for the image and its mask: one draw of DALI's random operators, used by both
            resizes and both flips (DALI's checkpoints keep their state: a resumed run draws the same)
evaluation  the whole image resized to the square, nothing random
both        --image-size square crops; images RGB, ImageNet mean/std, HWC, args.dtype(); masks (H, W) int32
"""

from __future__ import annotations

from nvidia.dali import fn, types

from dali_launch.trainer.data.contract import Pipeline, PipelineArgs
from dali_launch.trainer.data.pipelines import MEAN, STD, inputs

SIDE = (0.5, 1.0)  # a training window's height and width, as fractions of the image's


def _segmentation(args: PipelineArgs):
    return images_and_masks(*segmentation_inputs(args), args)


def segmentation_inputs(args: PipelineArgs):
    """(encoded images, encoded masks) of one shard, through `args.read`."""
    return inputs(args, "segmentation")


def images_and_masks(jpegs, pngs, args: PipelineArgs):
    """Both decoded and cropped alike (a random window and flip in training), as the module says."""
    images = args.decode(jpegs, output_type=types.RGB)  # --decoded-cache keeps whole images: windows come after
    masks = fn.decoders.image(pngs, device="cpu", output_type=types.GRAY)  # PNGs: the CPU's, on any device
    if args.on_gpu:
        masks = masks.gpu()
    size, window = [args.image_size] * 2, random_window() if args.training else {}
    images = fn.resize(images, size=size, interp_type=types.INTERP_LINEAR, **window)
    masks = fn.resize(masks, size=size, interp_type=types.INTERP_NN, antialias=False, **window)
    mirror = fn.random.coin_flip(probability=0.5) if args.training else 0
    images = fn.crop_mirror_normalize(
        images, dtype=args.dtype(), mean=MEAN, std=STD, mirror=mirror, output_layout="HWC"
    )
    if args.training:
        masks = fn.flip(masks, horizontal=mirror)  # the image's coin
    return images, fn.cast(fn.reshape(masks, shape=size, layout="HW"), dtype=types.INT32)


def random_window() -> dict:
    """fn.resize's arguments for one random window of each sample (relative coordinates, (y, x) order): the
    same DataNodes given to the image's resize and the mask's select the same pixels."""
    side = fn.random.uniform(range=SIDE, shape=[2])
    start = fn.random.uniform(range=[0.0, 1.0], shape=[2]) * (1.0 - side)
    return {"roi_start": start, "roi_end": start + side, "roi_relative": True}


segmentation = Pipeline(_segmentation, cacheable=True, whole_images=True)  # images through args.decode, whole
