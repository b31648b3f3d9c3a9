"""`--pipeline views` (the contrastive task's own): two views of each image of class folders, and its label.

It reads the `folders` format's splits (SPLIT/<class>/<file>.jpg, as `dali-launch data synth --format folders`
writes them) with that format's reader, and gives `view1`, `view2` and `labels`:
- training: each view its own random draw of SimCLR's recipe, scaled down for small images: a random resized
  crop (8-100 % of the area in SimCLR, 20-100 % here: a 32-pixel crop of 8 % is a few pixels of texture),
  a flip, colour jitter (brightness, contrast and saturation ±0.4, hue ±36°, applied with probability 0.8: its
  CIFAR-10 strength 0.5) and greyscale with probability 0.2; --augment's policy follows each crop;
- evaluation: the plain image as `folders` evaluates it (resize, centre crop), both views the same.
Both: --image-size square RGB, ImageNet mean/std, HWC floats; labels as scalars (they feed the task's linear
probe only). The whole image is decoded once (`args.decode`) and cropped twice. On GPUs every operator on pixels
runs there (nvJPEG's decoder, each view's crop, colour twist, flip and normalisation; the CPU reads and draws each
sample's random arguments: tests/test_gpu_placement.py), and --decoded-cache auto keeps the decoded images in DALI's
decoder cache where they fit: after the first epoch nothing is decoded (plan/data.py).
"""

from __future__ import annotations

from nvidia.dali import fn, types

from dali_launch.trainer.data import pipelines
from dali_launch.trainer.data.contract import Pipeline, PipelineArgs

AREA = [0.2, 1.0]  # of the image a crop keeps
ASPECT = [3 / 4, 4 / 3]
JITTER = 0.4  # brightness, contrast and saturation factors in 1 ± this
HUE_DEGREES = 36.0  # SimCLR's hue 0.1 of the colour circle
JITTER_P, GREY_P = 0.8, 0.2


def _views(args: PipelineArgs):
    jpegs, labels = pipelines.folders_inputs(args)
    if not args.training:  # deterministic, as evaluation must be: one centre crop stands for both views
        view, labels = pipelines.imagenet_augment(jpegs, labels, args)
        return view, view, labels
    image = args.decode(jpegs, output_type=types.RGB)
    view1, view2 = _augmented(image, args), _augmented(image, args)
    labels = labels.gpu() if args.on_gpu else labels
    return view1, view2, fn.reshape(labels, shape=[])


views = Pipeline(_views, cacheable=True, whole_images=True)


def _augmented(image, args: PipelineArgs):
    """One view: each random operator here is a new one, so the two views of an image draw apart."""
    size = args.image_size
    crop = fn.random_resized_crop(image, size=[size, size], random_area=AREA, random_aspect_ratio=ASPECT)
    crop = fn.color_twist(args.auto_augment(crop), **_distortion())
    return fn.crop_mirror_normalize(
        crop,
        dtype=args.dtype(),
        mean=pipelines.MEAN,
        std=pipelines.STD,
        mirror=fn.random.coin_flip(probability=0.5),
        output_layout="HWC",
    )


def _distortion() -> dict:
    """fn.color_twist's per-sample arguments: jitter with probability JITTER_P (else factors of 1), then
    greyscale (saturation 0) with probability GREY_P."""
    coin = lambda p: fn.cast(fn.random.coin_flip(probability=p), dtype=types.FLOAT)  # it draws integers only
    on, grey = coin(JITTER_P), coin(GREY_P)
    factor = lambda: 1.0 + on * fn.random.uniform(range=[-JITTER, JITTER])
    return {
        "brightness": factor(),
        "contrast": factor(),
        "saturation": factor() * (1.0 - grey),
        "hue": on * fn.random.uniform(range=[-HUE_DEGREES, HUE_DEGREES]),
    }
