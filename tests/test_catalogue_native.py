"""The catalogue of bad inputs, DALI's own pipeline functions (@pipeline_def, data_iterator: trainer/data/native.py):
a reader that would read every sample on every device, one told not to pad its shard, a parameter nothing fills,
an output_map other than the task's outputs, and --pipeline-params written wrong or given where it fills nothing.
Each ends with one exact line on stderr and exit code 2, nothing written, nothing started (see catalogue.py),
refused by the launcher's pre-flight (graph_check.check defines the graph on the CPU for each split). The module
here is on sys.path as a user's would be on PYTHONPATH."""

from __future__ import annotations

import sys
import textwrap

import pytest
from catalogue import check_entry

NATIVE_PIPES = """
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.jax import data_iterator


def _flat(jpegs):
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
    return fn.reshape(images, shape=[-1])


@data_iterator(output_map=["images", "labels"], reader_name="reader")
def unsharded(data_path, is_training, num_shards, shard_id):
    jpegs, labels = fn.readers.caffe2(path=data_path, random_shuffle=is_training, name="reader")
    return _flat(jpegs), labels


@pipeline_def
def no_shard_ids(data_path, is_training):
    jpegs, labels = fn.readers.caffe2(path=data_path, random_shuffle=is_training)
    return _flat(jpegs), labels


@data_iterator(output_map=["images", "labels"], reader_name="reader")
def unpadded(data_path, is_training, num_shards, shard_id):
    jpegs, labels = fn.readers.caffe2(
        path=data_path, name="reader", num_shards=num_shards, shard_id=shard_id, pad_last_batch=False
    )
    return _flat(jpegs), labels


@pipeline_def
def unfillable(data_path, shard_id, num_shards, crop):
    jpegs, labels = fn.readers.caffe2(path=data_path, shard_id=shard_id, num_shards=num_shards)
    return _flat(jpegs), labels


@data_iterator(output_map=["labels", "images"], reader_name="reader")
def swapped(data_path, is_training, num_shards, shard_id):
    jpegs, labels = fn.readers.caffe2(path=data_path, name="reader", num_shards=num_shards, shard_id=shard_id)
    return labels, _flat(jpegs)


def two_readers(path, shard_id, num_shards):
    jpegs, labels = fn.readers.caffe2(path=path, shard_id=shard_id, num_shards=num_shards)
    more, _ = fn.readers.caffe2(path=path, shard_id=shard_id, num_shards=num_shards)
    return _flat(jpegs) + _flat(more), labels


def contract(args):
    jpegs, labels = fn.readers.caffe2(path=args.path, **args.reader_args())
    return _flat(jpegs), labels
"""

READ_EVERYWHERE = "would read every sample on every device"
PADDED = "but each sample once an epoch needs its shard padded to whole batches"
ROLES = "path, training, shard_id, num_shards, num_classes, image_size, seed"
NOT_FOR_IT = "--pipeline-params fills the parameters of DALI's own pipeline functions, and --pipeline"


def entry(function: str, message: str, flags=(), id: str = ""):
    """--pipeline native_pipes:`function` (and `flags`) on a good data set: `message` exactly."""
    return pytest.param(function, list(flags), message, id=id or function.replace("_", "-"))


NATIVE = [
    entry(
        "unsharded",
        f"--pipeline native_pipes:unsharded: its reader is not given the function's shard_id and num_shards, "
        f"so it {READ_EVERYWHERE}; pass shard_id=shard_id, num_shards=num_shards to it",
    ),
    entry(
        "no_shard_ids",
        f"--pipeline native_pipes:no_shard_ids takes no shard_id and no num_shards, so its reader {READ_EVERYWHERE}; give it "
        f"shard_id and num_shards parameters and pass them to its reader (or name its own with --pipeline-params "
        f"NAME=shard_id,NAME=num_shards)",
    ),
    entry(
        "unpadded",
        f"--pipeline native_pipes:unpadded: its reader is given pad_last_batch=False, {PADDED}; leave "
        f"pad_last_batch out (the run sets it) or pass pad_last_batch=True",
    ),
    entry(
        "unfillable",
        f"--pipeline native_pipes:unfillable: no rule fills its parameter crop, which has no default; name it with "
        f"--pipeline-params crop=ROLE (ROLE one of {ROLES}) or crop=VALUE",
    ),
    entry(
        "swapped",
        "--pipeline native_pipes:swapped: its output_map ['labels', 'images'] is not the outputs the run's task "
        "takes, in order; use output_map=['images', 'labels']",
        id="output-map-not-the-tasks",
    ),
    entry(
        "two_readers",
        "--pipeline native_pipes:two_readers has 2 readers; the run shards exactly one (an fn.readers.* reader "
        "given shard_id and num_shards)",
    ),
    entry(
        "unfillable",
        "--pipeline-params crops=...: --pipeline native_pipes:unfillable has no parameter crops; its parameters "
        "are data_path, shard_id, num_shards, crop",
        ("--pipeline-params", "crops=3"),
        id="pipeline-params-names-no-parameter",
    ),
    entry(
        "unfillable",
        f"--pipeline-params crop,shard_id=0: 'crop' is not NAME=ROLE; write NAME=ROLE,... with ROLE one of {ROLES}, or "
        f"NAME=VALUE",
        ("--pipeline-params", "crop,shard_id=0"),
        id="pipeline-params-not-name-equals",
    ),
    entry(
        "unfillable",
        "--pipeline-params crop=3,crop=path names crop twice; give each parameter once",
        ("--pipeline-params", "crop=3,crop=path"),
        id="pipeline-params-names-one-twice",
    ),
    entry(
        "contract",
        f"{NOT_FOR_IT} native_pipes:contract is called as function(args); leave --pipeline-params out",
        ("--pipeline-params", "crop=3"),
        id="pipeline-params-for-a-contract-function",
    ),
]


@pytest.fixture(scope="module")
def native_pipes(tmp_path_factory):
    """native_pipes.py in a folder of its own, outside the folder an entry must leave as it was."""
    root = tmp_path_factory.mktemp("native-pipes")
    (root / "native_pipes.py").write_text(textwrap.dedent(NATIVE_PIPES))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    sys.modules.pop("native_pipes", None)


@pytest.mark.parametrize("function, flags, message", NATIVE)
def test_native_pipelines(capsys, place, nothing_starts, native_pipes, function, flags, message):
    args = ["train", "--pipeline", f"native_pipes:{function}", *flags, "--data-dir", "{data}", "--run-root", "{root}"]
    check_entry(capsys, place, args, message)


def test_pipeline_params_for_a_builtin_pipeline(capsys, place, nothing_starts):
    args = [
        "train",
        "--pipeline",
        "mnist",
        "--pipeline-params",
        "crop=3",
        "--data-dir",
        "{data}",
        "--run-root",
        "{root}",
    ]
    check_entry(capsys, place, args, f"{NOT_FOR_IT} mnist is built in; leave --pipeline-params out")
