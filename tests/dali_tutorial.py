"""DALI's multi-GPU JAX tutorial pipeline ("Training with multiple GPUs", DALI 2.4), as the tutorial writes it,
with its two GPU placements made CPU ones so that it runs on CPU devices: the decoder's device="mixed" is
device="cpu", and the labels stay on the CPU (the tutorial moves them with labels.gpu()). Nothing else differs:
the module builds its sharding over jax.devices() when imported, and `dali-launch train --pipeline
dali_tutorial:mnist_sharded_iterator` trains the function as it is (trainer/data/native.py).
benchmarks/dali_tutorial_gpu.py holds it with its GPU placements, for GPUs.

Beside it, the same graph written as DALI's other tutorials write pipelines: decorated with pipeline_def (the twin
of benchmarks/dali_tutorial_gpu.py's, which decodes with device="mixed" and moves the labels with labels.gpu()),
and with parameter names that only --pipeline-params can fill.
"""

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.jax import data_iterator

mesh = Mesh(jax.devices(), axis_names=("batch",))
sharding = NamedSharding(mesh, PartitionSpec("batch"))


@data_iterator(output_map=["images", "labels"], reader_name="mnist_caffe2_reader", sharding=sharding)
def mnist_sharded_iterator(data_path, is_training, num_shards, shard_id):
    jpegs, labels = fn.readers.caffe2(
        path=data_path,
        random_shuffle=is_training,
        name="mnist_caffe2_reader",
        num_shards=num_shards,
        shard_id=shard_id,
    )
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)  # the tutorial: device="mixed"
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
    images = fn.reshape(images, shape=[-1])  # 784 floats
    # the tutorial moves the labels to the GPU here: labels = labels.gpu()
    if is_training:
        labels = fn.one_hot(labels, num_classes=10)
    return images, labels


@pipeline_def(batch_size=64, num_threads=4, device_id=0)
def mnist_pipeline(path, random_shuffle, shard_id, num_shards, num_classes, seed=None):
    """The rule's other names: path, random_shuffle, num_classes (and seed, which keeps the run's)."""
    jpegs, labels = fn.readers.caffe2(
        path=path, random_shuffle=random_shuffle, shard_id=shard_id, num_shards=num_shards
    )
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
    return fn.reshape(images, shape=[-1]), fn.one_hot(labels, num_classes=num_classes)


@pipeline_def
def mnist_ranked(split_dir, rank, world, train, depth, scale=255.0):
    """Names no rule guesses: --pipeline-params split_dir=path,rank=shard_id,world=num_shards,train=training,depth=10."""
    jpegs, labels = fn.readers.caffe2(path=split_dir, random_shuffle=train, shard_id=rank, num_shards=world)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[scale], output_layout="CHW")
    return fn.reshape(images, shape=[-1]), fn.one_hot(labels, num_classes=depth)
