"""DALI's multi-GPU JAX tutorial pipeline ("Training with multiple GPUs", DALI 2.4), as the tutorial writes it:
nvJPEG decodes (device="mixed") and the labels move to the GPU (labels.gpu()). Its module builds the sharding
over jax.devices() when imported, as the tutorial does. Beside it, the same graph as DALI's other tutorials write
a pipeline (pipeline_def), its operators on the GPU after the mixed decode. benchmarks/tutorial.py trains both
unchanged on a GPU (`dali-launch train --pipeline dali_tutorial_gpu:mnist_sharded_iterator`, `...:mnist_pipeline`);
tests/dali_tutorial.py holds their CPU twins, the placements made CPU ones.
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
    images = fn.decoders.image(jpegs, device="mixed", output_type=types.GRAY)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
    images = fn.reshape(images, shape=[-1])  # 784 floats
    labels = labels.gpu()
    if is_training:
        labels = fn.one_hot(labels, num_classes=10)
    return images, labels


@pipeline_def(batch_size=64, num_threads=4, device_id=0)
def mnist_pipeline(path, random_shuffle, shard_id, num_shards, num_classes, seed=None):
    """nvJPEG, then crop_mirror_normalize, reshape and one_hot on the GPU, where their inputs are."""
    jpegs, labels = fn.readers.caffe2(
        path=path, random_shuffle=random_shuffle, shard_id=shard_id, num_shards=num_shards
    )
    images = fn.decoders.image(jpegs, device="mixed", output_type=types.GRAY)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
    return fn.reshape(images, shape=[-1]), fn.one_hot(labels.gpu(), num_classes=num_classes)
