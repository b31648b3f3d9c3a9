"""The model's outputs, checked before any job for a model the run's task does not bring, on a built-in pipeline.

entry_points.check has refused a factory that breaks the contract; this one initialises the model
abstractly (jax.eval_shape: no parameter computed, no device taken) on one sample shaped as the
pipeline will hand it over, and hands its outputs to the task's `check_model` (classification refuses
logits that are not (1, --num-classes); detection a model without its three heads). The built-in
pipelines' sample shapes follow from the data and the flags: mnist a flat vector of the data's
grey pixels, folders/tfrecord/webdataset --image-size square RGB crops. A pipeline of the user's
own is known only to the task, which checks the same at its initialisation (trainer/train.py).
"""

from __future__ import annotations

from pathlib import Path

from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer import entry_points
from dali_launch.trainer.data import formats
from dali_launch.trainer.data.records import caffe2


def crops() -> list[str]:
    """The built-in pipelines that give --image-size square RGB crops (HWC)."""
    return [f.name for f in formats.FORMATS if f.crops]


def flat(pipeline: str) -> bool:
    """Whether the built-in `pipeline` gives flat vectors (mnist's grey digits), not crops."""
    found = formats.get(pipeline)
    return found is not None and not found.crops


def check(run: RunConfig, data_dir: Path) -> None:
    name, task = run.model.model, entry_points.run_task(run)
    if name in entry_points.MODELS and name == (task.model or name):
        return  # ours take what ours give (classification any built-in); cnn-nnx's fixed input size is the task's
    shape = sample_shape(run, data_dir)
    if shape is None or task.check_model is None:
        return
    # JAX and Flax: imported only where the model is not the task's own; a user's imports them anyway
    from dali_launch.trainer.entry_points import create_model
    from dali_launch.trainer.model.contract import outputs_of

    task.check_model(name, outputs_of(name, create_model(name, run.data.num_classes), shape))


def sample_shape(run: RunConfig, data_dir: Path) -> tuple[int, ...] | None:
    """One sample's shape as the built-in pipeline gives it (trainer/data/pipelines.py), else None."""
    if run.data.pipeline in crops():
        return (run.data.image_size, run.data.image_size, 3)
    if flat(run.data.pipeline):
        height, width = caffe2.first_image_size(str(data_dir / "training"))
        return (height * width,)
    return None
