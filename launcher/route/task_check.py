"""The run's task, model and pipeline checked together before any job, where something in them is the user's.

entry_points.check has refused a factory or function that breaks its contract; this one takes one sample of
each of the pipeline's outputs and has trainer/tasks/check.py initialise the model abstractly (jax.eval_shape:
no parameter computed, no device taken) on it, hand its outputs to the task's `check_model` (classification:
logits (1, --num-classes)), trace the task's loss and evaluation on a batch of them, and call its summary on sums
of its evaluation's shapes, its headline looked up in what that returns. The built-in
pipelines' samples follow from the data and the flags: mnist a flat vector of the data's grey pixels and
one-hot labels, folders/tfrecord/webdataset --image-size square RGB crops and class ids, segmentation's
crops and their masks, audio's log-mel spectrograms and class ids; a pipeline of the
user's own is run once on the CPU (data/graph_check.sample). Where neither is known the task checks the same
at its start.
"""

from __future__ import annotations

from pathlib import Path

from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer import entry_points
from dali_launch.trainer.data import formats, spectrograms
from dali_launch.trainer.data.records import caffe2
from dali_launch.trainer.data.records.coco import MAX_OBJECTS


def crops() -> list[str]:
    """The built-in pipelines that give --image-size square RGB crops (HWC): the formats' own and their other
    readings (the contrastive views)."""
    readings = [r.name for r in formats.READINGS if formats.get(r.reads).crops]
    return [f.name for f in formats.FORMATS if f.crops] + readings


def flat(pipeline: str) -> bool:
    """Whether the built-in `pipeline` gives flat vectors (mnist's grey digits), not crops (nor spectrograms)."""
    found = formats.get(pipeline)
    return found is not None and not found.crops and not found.spectrogram


def masks(pipeline: str) -> bool:
    """Whether the built-in `pipeline` gives masks beside its images (segmentation's), not labels."""
    found = formats.get(pipeline)
    return found is not None and found.masks


def check(run: RunConfig, data_dir: Path, sample: dict | None = None) -> None:
    """`sample`: a pipeline of the user's own's one sample of each output (graph_check.sample), where it ran."""
    task = entry_points.run_task(run)
    if _ours(run, task):
        return  # built-in together: tested together
    sample = sample or builtin_sample(run, data_dir)
    if sample is None:
        return
    # JAX and Flax: imported only where something is the user's, which imports them anyway
    from dali_launch.trainer.tasks import check as task_check

    model = entry_points.create_model(run.model.model, run.data.num_classes, **entry_points.model_options(run.model))
    task_check.check(task, model, sample, (run.task.task, run.model.model, run.data.pipeline))


def _ours(run: RunConfig, task) -> bool:
    """The task, model and pipeline are built-in ones that go together: the task's own, or classification's."""
    builtin = all(value in entry_points.builtin(kind) for kind, value in _named(run))
    own = (run.model.model, run.data.pipeline) == (task.model or run.model.model, task.pipeline or run.data.pipeline)
    return builtin and own and run.model.model != "cnn-nnx"  # cnn-nnx's fixed input size is checked here


def _named(run: RunConfig):
    return (("task", run.task.task), ("model", run.model.model), ("pipeline", run.data.pipeline))


def builtin_sample(run: RunConfig, data_dir: Path) -> dict | None:
    """One sample of each output of a built-in pipeline, as it gives them (trainer/data/pipelines.py, the readings
    and the segmentation format's); None for an output named otherwise."""
    shape, found = sample_shape(run, data_dir), formats.reading(run.data.pipeline) or formats.get(run.data.pipeline)
    if shape is None or found is None:
        return None
    one_hot = getattr(found, "one_hot", False)  # a reading gives class ids
    kinds = {
        "images": (shape, "float32"),
        "view1": (shape, "float32"),
        "view2": (shape, "float32"),
        "masks": (shape[:2], "int32"),  # a class id per pixel of the crop
        "labels": ((run.data.num_classes,), "float32") if one_hot else ((), "int32"),
        "boxes": ((MAX_OBJECTS, 4), "float32"),  # detection's, padded: relative (left, top, right, bottom)
        "classes": ((MAX_OBJECTS,), "int32"),
        "counts": ((), "int32"),  # the real rows of an image's boxes
    }
    if not set(found.outputs) <= set(kinds):
        return None
    return {name: kinds[name] for name in found.outputs}


def sample_shape(run: RunConfig, data_dir: Path) -> tuple[int, ...] | None:
    """One sample's shape as the built-in pipeline gives it (trainer/data/pipelines.py), else None."""
    if run.data.pipeline in crops():
        return (run.data.image_size, run.data.image_size, 3)
    if flat(run.data.pipeline):
        height, width = caffe2.first_image_size(str(data_dir / "training"))
        return (height * width,)
    if formats.get(run.data.pipeline) is not None and formats.get(run.data.pipeline).spectrogram:
        return spectrograms.of(run.data).shape  # (mel bins, frames, channels): data/audio.py's
    return None
