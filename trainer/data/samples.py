"""One training sample of each output of a built-in pipeline, known from its format's record (formats.py) and
the run's [data] settings before any pipeline is built: the one place the built-in pipelines' outputs are
described. The launcher checks a task and model against it (launcher/route/task_check.py); the task compiles
its first device call on it while its pipelines are built (expected.py).

    images, view1, view2   --image-size square RGB crops (H, W, 3); mnist's flat grey pixels (H × W,); the audio
                           pipeline's log-mel spectrograms (mel bins, frames, channels: spectrograms.py)
    clips                  --clip-frames of those crops (T, H, W, 3): the video pipeline's training clips
    masks                  a class id per pixel of the crop (H, W), int32
    labels                 --num-classes one-hot floats where the format's training labels are (mnist), else a
                           class id, int32 (DALI's int64 ids arrive as int32)
    boxes, classes, counts the detection pipeline's boxes (records/coco.py's MAX_OBJECTS of them, relative), their
                           class ids and how many are real

It imports neither JAX nor DALI: the launcher reads it before any job.
"""

from __future__ import annotations

from pathlib import Path

from dali_launch.trainer.data import formats, spectrograms
from dali_launch.trainer.data.records import caffe2
from dali_launch.trainer.data.records.coco import MAX_OBJECTS

Sample = dict[str, tuple[tuple[int, ...], str]]  # output -> (shape, dtype) of one sample


def outputs(pipeline: str) -> tuple[str, ...] | None:
    """What the built-in `pipeline` returns, in order (a format's own, or a further reading's); None for the user's."""
    found = formats.reading(pipeline) or formats.get(pipeline)
    return None if found is None else found.outputs


def sample(data, split: str | Path, dtype: str = "float32") -> Sample | None:
    """One training sample of each output of the built-in `data.pipeline` (`data`: the [data] settings), reading
    `split` (mnist's first image gives its size), its images in `dtype`; None for a pipeline of the user's own, or
    an output this does not know."""
    names, found = outputs(data.pipeline), formats.get(data.pipeline)
    if names is None:
        return None
    image = _image(found, data, split)
    crop = (data.image_size, data.image_size)
    one_hot = found.one_hot and formats.reading(data.pipeline) is None  # a reading gives class ids
    kinds = {
        "images": (image, dtype),
        "view1": (image, dtype),
        "view2": (image, dtype),
        "clips": ((data.clip_frames, *crop, 3), dtype),
        "masks": (crop, "int32"),
        "labels": ((data.num_classes,), "float32") if one_hot else ((), "int32"),
        "boxes": ((MAX_OBJECTS, 4), "float32"),
        "classes": ((MAX_OBJECTS,), "int32"),
        "counts": ((), "int32"),
    }
    return {name: kinds[name] for name in names} if set(names) <= set(kinds) else None


def _image(found: formats.Format, data, split: str | Path) -> tuple[int, ...]:
    """One image as the format's pipeline gives it: a crop, a spectrogram, or mnist's flat pixels."""
    if found.crops:
        return (data.image_size, data.image_size, 3)
    if found.spectrogram:
        return tuple(spectrograms.of(data).shape)
    height, width = caffe2.first_image_size(found.reader_arguments(split)["path"])
    return (height * width,)
