"""What training's pipelines will hand over, known before they are built: for a built-in pipeline
(formats.py), one sample of each output (as DeviceBatches.sample_spec gives it) and an epoch's device calls.

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

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import bad_samples, formats, spectrograms
from dali_launch.trainer.data.contract import OUTPUTS
from dali_launch.trainer.data.records import caffe2
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


def guess(config: DataConfig, split: str, calls_per_epoch, task) -> Expected | None:
    """What a built-in pipeline's training split gives under the decided `config`, or None (a pipeline of
    the user's own, a task taking another number of outputs, or a split this cannot read: the build then says
    why). The outputs take the task's names, in order. `calls_per_epoch(samples)`: the device calls of an epoch
    of that many samples (batches.calls_per_epoch, for this job's shards)."""
    found = formats.get(config.pipeline)
    if not foresees(config, task):
        return None
    try:
        count = bad_samples.samples_read(found.reader, found.reader_arguments(split), config)
        shape = [config.image_size, config.image_size, 3] if found.crops else _flat(found, split, config)
    except Exception:
        return None
    if found.masks:  # a class id a pixel
        second = ([config.image_size, config.image_size], "int32")
    else:  # int64 ids arrive as int32
        second = ([config.num_classes], "float32") if found.one_hot else ([], "int32")
    images, labels = task.outputs
    sample = {images: {"shape": shape, "dtype": config.output_dtype}, labels: {"shape": second[0], "dtype": second[1]}}
    return Expected(sample, calls_per_epoch(count))


def foresees(config: DataConfig, task) -> bool:
    """Whether `guess` knows the pipeline: a built-in one of formats.py, giving the task its two outputs."""
    return formats.get(config.pipeline) is not None and len(task.outputs) == len(OUTPUTS)


def _flat(found: formats.Format, split: str, config: DataConfig) -> list[int]:
    """A pipeline of sounds' spectrogram, or a flat pipeline's vector: its grey images' pixels (every image of the
    split is the first's size)."""
    if found.spectrogram:
        return list(spectrograms.of(config).shape)
    height, width = caffe2.first_image_size(found.reader_arguments(split)["path"])
    return [height * width]
