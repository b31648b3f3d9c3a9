"""Where the tasks' own pipelines run on GPUs (--decoder mixed): every operator that touches pixels on the GPU,
the CPU left with the reader and each sample's random draws. Their graphs are defined for a GPU, not built
(DALI places each operator as it is defined; building one needs a GPU)."""

from __future__ import annotations

import pytest
from nvidia.dali.pipeline import Pipeline

from dali_launch.launcher.data.synth import SynthSpec, synth
from dali_launch.trainer.data import dali_graph, pipelines, segmentation, views
from dali_launch.trainer.data.contract import PipelineArgs

# What the CPU may run: readers, the random draws and the arithmetic that makes per-sample arguments of them,
# the labels' and boxes' small reshapes; the masks' PNGs (nvImageCodec decodes PNG on the CPU on either device).
ARGUMENTS = {"random__CoinFlip", "random__Uniform", "_ArithmeticGenericOp", "Cast"}
ON_THE_CPU = {
    "views": {"readers__File", *ARGUMENTS},
    "segmentation": {"readers__Webdataset", "decoders__Image", *ARGUMENTS},
    "detection": {"readers__COCO", "Slice", "BbFlip", "_Shape", "_TensorSubscript", *ARGUMENTS},
}
PIXELS = {  # what runs on the GPU, the decoder as "mixed" (its output on the GPU)
    "views": {"decoders__Image", "RandomResizedCrop", "ColorTwist", "CropMirrorNormalize", "Reshape"},
    "segmentation": {"decoders__Image", "Resize", "CropMirrorNormalize", "Flip", "Reshape", "Cast"},
    "detection": {"decoders__Image", "Resize", "CropMirrorNormalize"},
}
FUNCTIONS = {"views": views.views, "segmentation": segmentation.segmentation, "detection": pipelines.detection}
FORMATS = {"views": "folders", "segmentation": "segmentation", "detection": "detection"}


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("placement")
    for fmt in set(FORMATS.values()):
        synth(SynthSpec(root / fmt, fmt, classes=3, train=4, test=2, image_scale=0.1, shard_size=4, workers=1))
    return {name: root / fmt / "training" for name, fmt in FORMATS.items()}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_on_gpus_every_operator_on_pixels_runs_on_the_gpu(splits, name):
    args = PipelineArgs(str(splits[name]), 0, 1, 4, True, True, "mixed", 0, 3, 32)
    with Pipeline(batch_size=4, num_threads=1, device_id=0):
        outputs = FUNCTIONS[name](args)
    placed = {"cpu": set(), "gpu": set(), "mixed": set()}
    for instance in dali_graph.instances(outputs).values():
        placed[instance._op.device].add(dali_graph.kind(instance._op))
    assert all(node.device == "gpu" for node in outputs), [node.device for node in outputs]
    assert placed["mixed"] == {"decoders__Image"}
    assert placed["cpu"] - ON_THE_CPU[name] == set(), placed["cpu"]
    assert PIXELS[name] - {"decoders__Image"} <= placed["gpu"], placed["gpu"]
