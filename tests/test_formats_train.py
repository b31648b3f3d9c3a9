"""--pipeline tfrecord and webdataset train for real: several processes and devices read every
training sample once per epoch, and replicas stay identical."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from conftest import REPO, check_ok, dali_launch, only_run
from nvidia.dali import pipeline_def
from unaugmented_pipelines import tfrecord, webdataset

from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.observe.replicas import fingerprints

pytestmark = [pytest.mark.slow]
PIPELINES = {"tfrecord": tfrecord, "webdataset": webdataset}
SMALL_IMAGES = ["--model", "cnn", "--image-size", "32", "--num-classes", "4", "--batch-size", "8"]


def _reference_prints(fmt: str, split_dir) -> collections.Counter:
    """Every sample of the split once, one shard, through the same unaugmented pipeline."""
    n = 210
    args = PipelineArgs(str(split_dir), 0, 1, n, False, False, "cpu", 0, 4, 32)
    pipe = pipeline_def(lambda: PIPELINES[fmt](args), batch_size=n, num_threads=1, device_id=None)()
    pipe.build()
    images, labels = pipe.run()
    images = np.stack([np.array(images[i]) for i in range(n)])
    labels = np.array([int(np.array(labels[i])) for i in range(n)])
    return collections.Counter(fingerprints(images, labels).tolist())


@pytest.mark.multiprocess
@pytest.mark.parametrize("fmt", ["tfrecord", "webdataset"])
def test_every_sample_once_per_epoch_over_processes_and_devices(synth_sets, tmp_path, fmt):
    """2 processes × 2 devices, 4 shards of 210 samples (53, 53, 52, 52: the last step padded)."""
    proc = dali_launch(
        "--local",
        "--gpus-per-node",
        "4",
        "--processes",
        "2",
        "--init-timeout-s",
        "60",
        "--pipeline",
        f"unaugmented_pipelines:{fmt}",
        *SMALL_IMAGES,
        "--data-dir",
        str(synth_sets[fmt]),
        "--epochs",
        "2",
        "--record-samples",
        "--run-root",
        str(tmp_path),
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    check_ok(proc)
    paths = only_run(tmp_path)
    expected = _reference_prints(fmt, synth_sets[fmt] / "training")
    for epoch in range(2):
        seen = collections.Counter(np.concatenate([np.load(p) for p in paths.sample_records(epoch)]).tolist())
        assert seen == expected, f"epoch {epoch}: {sum(seen.values())} prints, {len(seen - expected)} extra"
    assert "4 replicas identical" in proc.stdout, proc.stdout
