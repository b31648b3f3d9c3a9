"""The one preparation every launch takes: every check of every run -> their directories (a dry run stops here).

Checks come first and write nothing: the settings (checks.py), CUDA flavours, --model/--pipeline/--task
contracts, the backend's own (SLURM's flags and cluster), the run root, the data, a pipeline of the user's
own defined on the CPU for each split (its outputs, its reader and that reader's sharding, its split's bad
samples, the function's own failure: trainer/data/graph_check.py; under --deterministic its operators:
trainer/determinism.py) and run once on the CPU for its samples' shapes (a graph on the GPU only defined), the
model on them, the task's loss and evaluation traced on them and its summary and headline on its evaluation's
sums (task_check.py), an --init-from checkpoint's shapes against the model's (init_check.py), a global batch no
larger than one step holding the whole training set, and last what the Python API sent (a model, pipeline or task
given as an object: sent_objects.py) loaded by a fresh interpreter as its tasks will load it; those checks saw the objects themselves. Then each run's directory is created (with what was
sent by value), or reopened for --resume (route/resume.py made the run's configuration from it).
A dry run prints what would run where the directories would be written, and nothing is.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from dali_launch.launcher.backends.base import Backend
from dali_launch.launcher.backends.this_process import Train
from dali_launch.launcher.console import echo
from dali_launch.launcher.data import datasets
from dali_launch.launcher.route import directory, init_check, machine_checks, rank_map, sent_objects, task_check
from dali_launch.launcher.route.checks import batch_within, profile_within, validate
from dali_launch.launcher.run_config import RunConfig, task_spec
from dali_launch.trainer import determinism, flavours, jax_private
from dali_launch.trainer.data import contract, formats, graph_check
from dali_launch.trainer.data import registry as pipelines
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model import registry as models
from dali_launch.trainer.plan import xla_options
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.tasks import registry as tasks
from dali_launch.trainer.topology import missing_gpu


def prepare(
    runs: list[RunConfig], backend: Backend, changed: bool = False, heading: str = "", started: bool = False
) -> list[RunPaths] | None:
    """The run directories the tasks will read, or None after a dry run. `changed`: a resumed run's
    configuration differs from what its directory holds (more epochs, say) and is written back.
    `heading`: what a dry run prints first (a sweep's points). `started`: the backend will start the tasks and
    leave them (Backend.start, the Python API's), not run them in this process."""
    for run in runs:  # every run's settings first: a sweep's bad point is named before any point's data is read
        validate(run)
    # The backend's checks (SLURM's flags, the cluster) see one job shape, the same for every run.
    with _jax_on_the_cpu(backend, started):
        data_dirs = [check(run, backend if i == 0 else None) for i, run in enumerate(runs)]
    first = runs[0]
    if first.launch.dry_run:
        echo(dry_run(runs, backend, data_dirs, heading))
        return None
    if first.launch.resume:
        return [backend.reopen_run_dir(first, data_dirs[0], changed)]
    made = []
    for run, data_dir in zip(runs, data_dirs):
        made.append(backend.make_run_dir(run, data_dir))
        if len(runs) == 1:
            echo(f"run directory: {made[-1].root}")
    return made


@contextlib.contextmanager
def _jax_on_the_cpu(backend: Backend, started: bool):
    """The checks' JAX kept to the CPU where the tasks are processes of their own (--local, SLURM, any run the
    Python API starts): a --pipeline or --model module that asks JAX for its devices when imported (DALI's JAX
    tutorials build their sharding so) would start it on the GPUs here, and XLA would take most of their memory
    from the tasks. `train` and `task` train in this process: its JAX is the task's, which trainer/task.py sets up."""
    if (isinstance(backend, Train) and not started) or jax_private.backends_started():
        yield
        return
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_platforms", "cpu")
        yield
        return
    before = os.environ.get("JAX_PLATFORMS")
    os.environ["JAX_PLATFORMS"] = "cpu"  # what JAX reads when it is imported; the tasks get the environment back
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("JAX_PLATFORMS", None)
        else:
            os.environ["JAX_PLATFORMS"] = before


def check(run: RunConfig, backend: Backend | None) -> Path:
    """Every check before anything is written, cheapest first; the run's data, checked."""
    validate(run)
    flavours.check()  # before any device is taken or job queued; the task checks again
    models.check(run.model.model, run.data.num_classes)
    pipelines.check(run.data.pipeline)
    task = tasks.run_task(run)  # --task: importable, a Task or a factory of one, its options taken
    builtin_outputs(run, task)
    if run.data.pipeline not in pipelines.pipelines():  # the built-ins' own modules import DALI (0.4 s)
        contract.cacheable(pipelines.load(run.data.pipeline), run.data.pipeline, run.data.decoded_cache)
    xla_options.check(run.xla.xla_options)  # an unknown name in XLA_FLAGS would abort every rank
    if backend is not None:
        backend.check(run)
    if not run.launch.resume:
        directory.check_root(run.launch.run_root)
    machine_checks.check_cache(run)
    data_dir, samples = data_of(run)
    on_this_machine = run.launch.local or getattr(backend, "name", "") in ("train", "allocation")  # where its tasks run
    own = run.data.pipeline not in pipelines.pipelines()
    sample = own_pipeline(run, data_dir, on_this_machine) if own else None
    task_check.check(run, data_dir, sample)  # the model, the task's loss, evaluation, summary on the data's samples
    init_check.check(run, data_dir)  # --init-from's shapes against the model's, in a CPU child (seconds)
    if samples is not None:  # after the parts' own checks: a small data set that tries them says what they lack
        batch_within(run, samples, data_dir / "training")
    sent_objects.check(run)  # the Python API's objects, loaded in a fresh interpreter (seconds)
    return data_dir


def own_pipeline(run: RunConfig, data_dir: Path, on_this_machine: bool) -> dict | None:
    """A pipeline of the user's own, its graph defined here for each split: its outputs, its reader and how
    that is sharded, what `args.read`'s screen refuses (a bad sample); under --deterministic its operators.
    Returns one training sample of each output, its graph run once on the CPU (graph_check.sample); None for a
    graph the function placed on the GPU, refused where the tasks run on this machine and it has none.
    Such a graph is not run here: under --local and SLURM this launcher keeps off its tasks' GPUs, and a Python
    API submission checks in the caller's process while another process trains (DALI's CUDA context and memory
    pool would stay in the caller, on the GPU the run uses)."""
    outputs = tasks.run_task(run).outputs  # what the run's task takes from the pipeline, in order
    for split in datasets.SPLITS:
        args = _graph_args(run, data_dir, split)
        graph_check.check(run.data.pipeline, args, run.data.sample_order == "shards", outputs)
    if run.xla.deterministic:
        determinism.check_pipeline(run.data.pipeline, _graph_args(run, data_dir, "training"))
    sample = graph_check.sample(run.data.pipeline, _graph_args(run, data_dir, "training"), outputs)
    why = missing_gpu() if sample is None and on_this_machine else None
    if why:
        raise UsageError(
            f'--pipeline {run.data.pipeline} puts its outputs on the GPU (its own device="mixed" or .gpu()), '
            f"but {why}; run it on a GPU machine, or give its decoders **args.decoder_args()"
        )
    return sample


def builtin_outputs(run: RunConfig, task) -> None:
    """A built-in pipeline gives, by name and in order, what the run's task takes (a pipeline of the user's own is
    defined and counted by own_pipeline: its outputs take the task's names)."""
    pipeline, outputs = run.data.pipeline, tuple(task.outputs)
    found = formats.reading(pipeline) or formats.get(pipeline)
    if found is None or tuple(found.outputs) == outputs:
        return
    fitting = [f.name for f in (*formats.FORMATS, *formats.READINGS) if tuple(f.outputs) == outputs]
    bringing = tasks.task_bringing(pipeline)
    if task.pipeline:
        fix = f"leave --pipeline out to take the task's own ({task.pipeline})"
    elif bringing:
        fix = f"add --task {bringing}"
    elif run.task.task not in tasks.TASKS:
        fix = "name the task's outputs as the pipeline gives them, or use a --pipeline of your own"
    else:
        fix = f"use one that gives them ({', '.join(fitting)}) or your own" if fitting else "use your own"
    raise UsageError(
        f"--pipeline {pipeline} gives {', '.join(found.outputs)}, but --task {run.task.task} takes "
        f"{', '.join(outputs)}; {fix}"
    )


def _graph_args(run: RunConfig, data_dir: Path, split: str):
    """What a pipeline function is given to define a split's graph here: one CPU reader, of the second of two
    shards (a reader not given args.reader_args() reads shard 0 of 1: its arguments show it), screening the
    split as the run's --bad-samples says."""
    from dali_launch.trainer.data.contract import AUDIO_SETTINGS, PipelineArgs

    d = run.data
    return PipelineArgs(
        path=str(data_dir / split),
        shard_id=1,
        num_shards=2,
        batch_size=1,
        training=split == "training",
        on_gpu=False,
        decoder="cpu",
        seed=run.step.seed,
        num_classes=d.num_classes,
        image_size=d.image_size,
        hw_decoder_load=d.hw_decoder_load,
        bad_samples=d.bad_samples,
        max_bad_samples=d.max_bad_samples,
        pipeline_params=d.pipeline_params,
        clip_frames=d.clip_frames,
        clip_stride=d.clip_stride,
        clip_window=d.clip_window,
        eval_clips=d.eval_clips,
        **{name: getattr(d, name) for name in AUDIO_SETTINGS},
    )


def data_of(run: RunConfig) -> tuple[Path, int | None]:
    """The run's data, checked: the flags' (or the default) for a new run, the run's own when resuming;
    its samples screened (--bad-samples). With the training samples a built-in pipeline reads (else None)."""
    if run.launch.resume:
        path = datasets.check_resumed(run.data, run.launch.resume)
    else:
        path = datasets.data_dir_of(run.data.data_dir, run.data.pipeline, run.data.num_classes)
    samples = datasets.check_samples(path, run.data, run.device_counts[0])
    if samples is not None:
        profile_within(run, samples)
    return path, samples


def dry_run(runs: list[RunConfig], backend: Backend, data_dirs: list[Path], heading: str) -> str:
    """What would run: the heading, the (first) run's rank map, the backend's own (its batch script)."""
    first = runs[0]
    run_dirs = [Path(run.launch.resume or Path(run.launch.run_root).absolute() / "RUN_DIR") for run in runs]
    specs = [
        task_spec(run, str(run_dir), str(data_dir), backend.spec_name).to_json()
        for run, run_dir, data_dir in zip(runs, run_dirs, data_dirs)
    ]
    parts = [heading, rank_map.describe(first), backend.dry_run(runs, run_dirs, specs)]
    return "\n".join(part for part in parts if part)
