"""--pipeline tfrecord, webdataset and folders train for real: several processes and devices read every
training sample once per epoch, in either --sample-order, and replicas stay identical. Class folders
are listed by process 0 alone and read from its listing by the others (records/shared.py)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from conftest import REPO, check_ok, dali_launch
from nvidia.dali import fn, pipeline_def
from run_readers import only_run, seen_prints
from unaugmented_pipelines import folders, tfrecord, webdataset

from dali_launch.trainer.data import pipelines, records
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.data.global_order import fingerprint
from dali_launch.trainer.observe.replicas import fingerprints

pytestmark = [pytest.mark.slow]
PIPELINES = {"tfrecord": tfrecord, "webdataset": webdataset, "folders": folders}
SMALL_IMAGES = ["--model", "cnn", "--image-size", "32", "--num-classes", "4", "--batch-size", "8"]


def _whole_split(function, split_dir, n: int = 210, args_type=PipelineArgs) -> list[list[np.ndarray]]:
    """Every sample of the split once, in the reader's own order (one shard, one batch): each output's arrays."""
    args = args_type(str(split_dir), 0, 1, n, False, False, "cpu", 0, 4, 32)
    pipe = pipeline_def(lambda: tuple(function(args)), batch_size=n, num_threads=1, device_id=None)()
    pipe.build()
    return [[np.array(out[i]) for i in range(n)] for out in pipe.run()]


def _reference_prints(fmt: str, split_dir) -> collections.Counter:
    """Every sample of the split once, one shard, through the same unaugmented pipeline."""
    images, labels = _whole_split(PIPELINES[fmt], split_dir)
    return collections.Counter(fingerprints([np.stack(images), np.stack(labels)]).tolist())


@pytest.mark.parametrize("fmt", ["tfrecord", "webdataset", "folders"])
def test_a_record_source_reads_what_dalis_reader_reads(synth_sets, fmt):
    """--sample-order global's source (records/) numbers the samples as DALI's native reader does, and reads
    the same bytes and class ids: opened from the very arguments the built-in pipeline gives `args.read`."""
    asked = {}

    class Asking(PipelineArgs):
        def read(self, reader: str, **kwargs):
            asked.update(reader=reader, kwargs=kwargs)
            return super().read(reader, **kwargs)

    encoded, labels = _whole_split(getattr(pipelines, f"{fmt}_inputs"), synth_sets[fmt] / "training", args_type=Asking)
    source = records.open_source(asked["reader"], asked["kwargs"])
    assert len(source) == len(encoded) == 210
    # What the launcher checks a resumed run's data set by, found from the folder alone.
    assert records.fingerprint_of(synth_sets[fmt] / "training") == fingerprint(source.keys())
    for i, (image, label) in enumerate(zip(encoded, labels)):
        mine = source.read(i)
        assert (mine[0].tobytes(), mine[1]) == (image.tobytes(), int(label.ravel()[0])), i


@pytest.mark.multiprocess
# Class folders in shard order: DALI's file readers take process 0's listing; a global order's shared source
# is the same pickle for every format, which the others show.
@pytest.mark.parametrize(
    ("fmt", "order"),
    [(f, o) for f in ("tfrecord", "webdataset") for o in ("shards", "global")] + [("folders", "shards")],
)
def test_every_sample_once_per_epoch_over_processes_and_devices(synth_sets, tmp_path, fmt, order):
    """2 processes × 2 devices; shards: 4 shards of 210 samples (53, 53, 52, 52: the last step padded);
    global: one permutation of the 210 an epoch (through records/), 7 steps of 32, the last one padded."""
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
        "--sample-order",
        order,
        "--run-root",
        str(tmp_path),
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    check_ok(proc)
    paths = only_run(tmp_path)
    expected = _reference_prints(fmt, synth_sets[fmt] / "training")
    for epoch in range(2):
        seen = seen_prints(paths, epoch)
        assert seen == expected, f"epoch {epoch}: {sum(seen.values())} prints, {len(seen - expected)} extra"
    assert "4 replicas identical" in proc.stdout, proc.stdout
    # Listed once, by process 0: class folders in either order, both splits (DALI's file readers take the
    # .txt); under a global order the training split's record source of every format.
    listed = sorted(p.suffix for p in paths.root.glob("listings/*"))
    assert listed == ([".pkl", ".pkl", ".txt", ".txt"] if fmt == "folders" else [".pkl"] * (order == "global")), listed


def test_a_folder_listing_reads_what_walking_the_folders_reads(synth_sets, tmp_path):
    """What process 0 writes for the other ranks' file readers (records/shared.py) numbers and labels the
    samples exactly as DALI's walk of the folders does."""
    split = synth_sets["folders"] / "training"
    listing = tmp_path / "files.txt"
    listing.write_text(records.open_source("file", {"file_root": str(split)}).file_list())
    walked = _whole_split(lambda args: fn.readers.file(file_root=args.path, **args.reader_args()), split)
    listed = _whole_split(
        lambda args: fn.readers.file(file_root=args.path, file_list=str(listing), **args.reader_args()), split
    )
    for mine, theirs in zip(listed, walked):
        assert [a.tobytes() for a in mine] == [a.tobytes() for a in theirs]
