"""The run's task, model and pipeline checked together before any job, where something in them is the user's.

The loaders' checks (model/registry.py, data/registry.py) have refused a factory or function that breaks its contract; this one takes one sample of
each of the pipeline's outputs and has trainer/step/dry_run.py initialise the model abstractly (jax.eval_shape:
no parameter computed, no device taken) on it, hand its outputs to the task's `check_model` (classification:
logits (1, --num-classes)), trace the task's loss and evaluation on a batch of them, and call its summary on sums
of its evaluation's shapes, its headline looked up in what that returns. The built-in
pipelines' samples follow from the data and the flags (trainer/data/samples.py); a pipeline of the
user's own is run once on the CPU (data/graph_check.sample). Where neither is known the task checks the same
at its start.
"""

from __future__ import annotations

from pathlib import Path

from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.data import formats, samples
from dali_launch.trainer.data.registry import pipelines
from dali_launch.trainer.model.registry import MODELS, create_model, model_options
from dali_launch.trainer.tasks.registry import TASKS, run_task


def crops() -> list[str]:
    """The built-in pipelines that give --image-size square RGB crops (HWC): the formats' own and their other
    readings (the contrastive views)."""
    readings = [r.name for r in formats.READINGS if formats.get(r.reads).crops]
    return [f.name for f in formats.FORMATS if f.crops] + readings


def flat(pipeline: str) -> bool:
    """Whether the built-in `pipeline` gives flat vectors (mnist's grey digits), not crops (nor spectrograms)."""
    found = formats.get(pipeline)
    return found is not None and not found.crops and not found.spectrogram


def check(run: RunConfig, data_dir: Path, sample: dict | None = None) -> None:
    """`sample`: a pipeline of the user's own's one sample of each output (graph_check.sample), where it ran."""
    task = run_task(run)
    if _ours(run, task):
        return  # built-in together: tested together
    sample = sample or builtin_sample(run, data_dir)
    if sample is None:
        return
    # JAX and Flax: imported only where something is the user's, which imports them anyway
    from dali_launch.trainer.step import dry_run

    model = create_model(run.model.model, run.data.num_classes, **model_options(run.model))
    dry_run.check(task, model, sample, (run.task.task, run.model.model, run.data.pipeline))


def _ours(run: RunConfig, task) -> bool:
    """The task, model and pipeline are built-in ones that go together: the task's own, or classification's."""
    builtin = run.task.task in TASKS and run.model.model in MODELS and run.data.pipeline in pipelines()
    own = (run.model.model, run.data.pipeline) == (task.model or run.model.model, task.pipeline or run.data.pipeline)
    return builtin and own and run.model.model != "cnn-nnx"  # cnn-nnx's fixed input size is checked here


def builtin_sample(run: RunConfig, data_dir: Path) -> dict | None:
    """One sample of each output of a built-in pipeline, as it gives them (trainer/data/samples.py); None for
    a pipeline of the user's own."""
    return samples.sample(run.data, data_dir / "training")


def sample_shape(run: RunConfig, data_dir: Path) -> tuple[int, ...] | None:
    """The shape of one sample the model sees (the built-in pipeline's first output), else None."""
    given = builtin_sample(run, data_dir)
    return next(iter(given.values()))[0] if given else None
