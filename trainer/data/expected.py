"""What training's pipelines will hand over, known before they are built: for a built-in pipeline
(samples.py), one sample of each output (as DeviceBatches.sample_spec gives it) and an epoch's device calls.

set_up.py initialises the model and compiles the first device call on these while the pipelines are
built, where both waited for the pipelines' first batch: on a GPU host that build took 1.6-2.2 s and
the step's compile 4.2 s of a cold start, one after the other (docs/performance.md#start-up). The first
batch then confirms the guess, or it is dropped and both are done on the batch as before: a wrong guess
costs a compile, never a wrong program.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from dali_launch.trainer.data import bad_samples, formats, samples
from dali_launch.trainer.data.decided import DataPlan
from dali_launch.trainer.data.rows import laid_out


@dataclass(frozen=True)
class Expected:
    sample: dict  # {name: {"shape": [...], "dtype": str}} of one sample, DeviceBatches.sample_spec's form
    steps: int  # device calls an epoch, DeviceBatches.steps

    def example(self, name: str) -> np.ndarray:
        """A zero batch of one sample shaped like output `name` (DeviceBatches.first_sample)."""
        output = self.sample[name]
        return np.zeros((1, *output["shape"]), output["dtype"])

    def batch(self, sharding: jax.sharding.NamedSharding, rows: int) -> dict:
        """A device call's batch as abstract arrays: `rows` samples a device (its readers' end to end), one
        row of devices per mesh device, and the masks of which rows are real (DeviceBatches._read)."""
        sample = {name: (output["shape"], output["dtype"]) for name, output in self.sample.items()}
        shaped = {name: laid_out((rows, *shape), dtype, sharding) for name, (shape, dtype) in sample.items()}
        return shaped | {"valid": laid_out((rows,), np.float32, sharding)}


def guess(data: DataPlan, split: str, calls_per_epoch, task) -> Expected | None:
    """What a built-in pipeline's training split gives as `data` plans it (samples.py), or None (a pipeline of the
    user's own, a task taking another number of outputs, or a split this cannot read: the build then says why).
    The outputs take the task's names, in order. `calls_per_epoch(samples)`: the device calls of an epoch of that
    many samples (batches.calls_per_epoch, for this job's shards)."""
    if not foresees(data.pipeline, task):
        return None
    found, settings = formats.get(data.pipeline), data.settings
    try:
        count = bad_samples.samples_read(found.reader, found.reader_arguments(split), settings)
        given = samples.sample(settings, split, data.output_dtype)
    except Exception:
        return None
    if given is None:
        return None
    shaped = [{"shape": list(shape), "dtype": dtype} for shape, dtype in given.values()]
    return Expected(dict(zip(task.outputs, shaped)), calls_per_epoch(count))


def foresees(pipeline: str, task) -> bool:
    """Whether `guess` knows `pipeline`: a built-in one (samples.py), giving the task as many outputs as it takes."""
    names = samples.outputs(pipeline)
    return names is not None and len(names) == len(task.outputs)
