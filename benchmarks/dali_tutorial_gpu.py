"""DALI's multi-GPU JAX tutorial pipeline ("Training with multiple GPUs", DALI 2.4), as the tutorial writes it:
nvJPEG decodes (device="mixed") and the labels move to the GPU (labels.gpu()). Its module builds the sharding
over jax.devices() when imported, as the tutorial does. benchmarks/tutorial.py trains it unchanged on a GPU
(`dali-launch train --pipeline dali_tutorial_gpu:mnist_sharded_iterator`); tests/dali_tutorial.py is its CPU
twin, the two placements made CPU ones.
"""

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from nvidia.dali import fn, types
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
    images = fn.decoders.image(jpegs, device="mixed", output_type=types.GRAY)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
    images = fn.reshape(images, shape=[-1])  # 784 floats
    labels = labels.gpu()
    if is_training:
        labels = fn.one_hot(labels, num_classes=10)
    return images, labels
