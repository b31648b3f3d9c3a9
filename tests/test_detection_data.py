"""--format detection's data: `data synth` draws every annotated shape where its box says, in its class's colour,
and the detection pipeline keeps each box on its object through the resize, the random flip and the padding
(what it reads is held to DALI's reader in test_formats.py). Bad detection input (data, flags, a model without
the heads) stops in one line before anything is written, as the catalogue's entries do."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from catalogue import check_entry
from nvidia.dali import pipeline_def
from PIL import Image

from dali_launch.launcher.data import coco_check
from dali_launch.launcher.data.synth import SynthSpec, synth
from dali_launch.launcher.data.synth_boxes import colour
from dali_launch.trainer.data import pipelines
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.data.pipelines import MEAN, STD
from dali_launch.trainer.data.records.coco import MAX_OBJECTS
from dali_launch.trainer.errors import UsageError

CLASSES, IMAGES, SIDE = 4, 24, 64


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("detection") / "data"
    synth(SynthSpec(root, "detection", CLASSES, IMAGES, 8, seed=3, image_scale=0.15, shard_size=10, workers=1))
    return root


def _objects(split) -> list[list[tuple[int, list[int]]]]:
    """Each image's (class, COCO box) in the annotations' order, images by id."""
    found = json.loads((split / "annotations.json").read_text())
    objects = [[] for _ in found["images"]]
    for a in found["annotations"]:
        objects[a["image_id"]].append((a["category_id"], a["bbox"]))
    return objects


def _class_of(pixels: np.ndarray) -> int:
    """The class whose colour the mean of `pixels` (..., 3) points at: hues apart, brightness aside."""
    mean = pixels.reshape(-1, 3).mean(0)
    colours = np.stack([colour(c, CLASSES) for c in range(CLASSES)])
    cosine = colours @ mean / (np.linalg.norm(colours, axis=1) * np.linalg.norm(mean))
    return int(np.argmax(cosine)) if cosine.max() > 0.97 else -1


def test_every_annotated_shape_is_drawn_in_its_box_in_its_colour(data):
    """The writer's side: the centre of every box shows its class, 1 to 4 objects an image, every class seen."""
    objects = _objects(data / "training")
    assert {len(o) for o in objects} == {1, 2, 3, 4} and {c for o in objects for c, _ in o} == set(range(CLASSES))
    for index, found in enumerate(objects):
        pixels = np.asarray(Image.open(io.BytesIO((data / "training" / f"{index:08d}.jpg").read_bytes())), np.float32)
        for category, (x, y, w, h) in found:
            centre = pixels[y + h // 2 - 1 : y + h // 2 + 1, x + w // 2 - 1 : x + w // 2 + 1]
            assert _class_of(centre) == category, (index, category)


class Ordered(PipelineArgs):
    """A split read in its order for training too: both pipelines then see image i at once."""

    def reader_args(self) -> dict:
        return {**super().reader_args(), "random_shuffle": False}


def _read(split, training: bool) -> dict:
    args = Ordered(str(split), 0, 1, IMAGES, training, False, "cpu", 7, CLASSES, SIDE)
    pipe = pipeline_def(lambda: tuple(pipelines.detection(args)), batch_size=IMAGES, num_threads=1, device_id=None)()
    pipe.build()
    names = ("images", "boxes", "classes", "counts")
    return {name: np.array(out.as_array()) for name, out in zip(names, pipe.run())}


def test_the_pipeline_keeps_each_box_on_its_object_through_the_flip_and_the_padding(data):
    split = data / "training"
    plain, flipped = _read(split, training=False), _read(split, training=True)
    assert plain["images"].shape == (IMAGES, SIDE, SIDE, 3) and plain["boxes"].shape == (IMAGES, MAX_OBJECTS, 4)
    assert plain["classes"].dtype == np.int32 and plain["counts"].shape == (IMAGES,)
    mirrored = 0
    for i, objects in enumerate(_objects(split)):
        n = len(objects)
        assert plain["counts"][i] == flipped["counts"][i] == n
        assert list(plain["classes"][i, :n]) == list(flipped["classes"][i, :n]) == [c for c, _ in objects]
        for out in (plain, flipped):  # the padding: zero rows after the real objects
            assert not out["boxes"][i, n:].any() and not out["classes"][i, n:].any()
        image, boxes = flipped["images"][i], flipped["boxes"][i, :n]
        if np.array_equal(image, plain["images"][i, :, ::-1]):  # this one was flipped: its boxes with it
            mirrored += 1
            left, top, right, bottom = plain["boxes"][i, :n].T
            np.testing.assert_allclose(boxes, np.stack([1 - right, top, 1 - left, bottom], -1), atol=1e-6)
        else:
            np.testing.assert_array_equal(image, plain["images"][i])
            np.testing.assert_array_equal(boxes, plain["boxes"][i, :n])
        for category, (left, top, right, bottom) in zip(flipped["classes"][i], boxes):
            pixels = image * STD + MEAN  # back to RGB
            x, y = int((left + right) / 2 * SIDE), int((top + bottom) / 2 * SIDE)
            assert _class_of(pixels[y - 1 : y + 1, x - 1 : x + 1]) == category, (i, category)
    assert 0 < mirrored < IMAGES  # both ways were taken


def _write(split, change) -> None:
    path = split / "annotations.json"
    found = json.loads(path.read_text())
    change(found)
    path.write_text(json.dumps(found))


def test_the_data_check_refuses_a_class_out_of_range_and_a_crowd_the_pipeline_would_cut(data, tmp_path):
    """The launcher's check of the data (the catalogue in test_detection.py runs it through the CLI); a crowd of
    more than MAX_OBJECTS an image, read anyway by the pipeline, is cut to its first MAX_OBJECTS."""
    coco_check.check_detection(data, "--data-dir", CLASSES)
    with pytest.raises(UsageError, match=rf"^--num-classes 3 but {data}/training/annotations.json gives an object"):
        coco_check.check_detection(data, "--data-dir", 3)
    broken = tmp_path / "broken"
    synth(SynthSpec(broken, "detection", CLASSES, IMAGES, 8, image_scale=0.1, shard_size=10, workers=1))
    (broken / "training" / "annotations.json").write_text('{"images": [')
    with pytest.raises(UsageError, match=r"annotations.json is not a COCO annotations file \(cannot be read as JSON"):
        coco_check.check_detection(broken, "--data-dir", CLASSES)
    crowded = tmp_path / "crowded"
    synth(SynthSpec(crowded, "detection", CLASSES, IMAGES, 8, image_scale=0.1, shard_size=10, workers=1))
    many = {"image_id": 0, "category_id": 0, "bbox": [1, 1, 2, 2]}
    _write(crowded / "testing", lambda found: found["annotations"].extend([{**many, "id": 100 + k} for k in range(20)]))
    with pytest.raises(UsageError, match=rf"gives 00000000.jpg \d+ objects, more than the {MAX_OBJECTS} an image"):
        coco_check.check_detection(crowded, "--data-dir", CLASSES)
    args = Ordered(str(crowded / "testing"), 0, 1, 1, False, False, "cpu", 0, CLASSES, SIDE)
    pipe = pipeline_def(lambda: tuple(pipelines.detection(args)), batch_size=1, num_threads=1, device_id=None)()
    pipe.build()
    _, boxes, classes, counts = (np.array(out.as_array())[0] for out in pipe.run())
    annotated = _objects(crowded / "testing")[0]
    assert len(annotated) > MAX_OBJECTS and counts == MAX_OBJECTS and boxes.shape == (MAX_OBJECTS, 4)
    assert list(classes) == [c for c, _ in annotated[:MAX_OBJECTS]]  # the first ones, in the annotations' order


def _small(change=None, split: str = "training"):
    """A small detection set for a catalogue entry (3 classes), then `change(annotations)` of a split (None:
    its annotations file removed)."""

    def make(tmp) -> dict:
        root = tmp / "data"
        synth(SynthSpec(root, "detection", 3, 6, 3, image_scale=0.1, shard_size=4, workers=1))
        if change:
            _write(root / split, change)
        elif split != "training":
            (root / split / "annotations.json").unlink()
        return {"data": root}

    return make


def _relabel(found: dict) -> None:
    found["annotations"][2]["category_id"] = 7


def _lose_an_image(found: dict) -> None:
    found["images"][1]["file_name"] = "gone.jpg"


TASK = ["--task", "detection", "--num-classes", "3"]
FIX = "re-create the data set with `dali-launch data synth OUT --format detection`"


REFUSED = [
    pytest.param(
        ["--pipeline", "detection", "--num-classes", "3"],
        "--pipeline detection gives images, boxes, classes, counts, but --task classification takes images, labels; "
        "add --task detection",
        _small(),
        id="detection-pipeline-without-its-task",
    ),
    pytest.param(
        ["--pipeline", "detection", "--num-classes", "3", "--sample-order", "global"],
        "--sample-order global feeds a pipeline an image and a class id a sample, but --pipeline detection reads "
        "COCO annotations and images with DALI's own reader; use --sample-order shards",
        _small(),
        id="detection-in-a-global-order",
    ),
    pytest.param(
        ["--pipeline", "detection", "--num-classes", "3", "--augment", "randaugment"],
        "--augment randaugment moves and warps an image's pixels, not the boxes on them: --pipeline detection "
        "takes none; use --augment none",
        _small(),
        id="detection-augmented",
    ),
    pytest.param(
        TASK,
        "--num-classes 3 but {data}/training/annotations.json gives an object of 00000001.jpg class 7; "
        "use --num-classes 8 or more",
        _small(_relabel),
        id="detection-class-out-of-range",
    ),
    pytest.param(
        TASK,
        f"{{data}}/testing has no annotations.json for --pipeline detection; {FIX}",
        _small(split="testing"),
        id="detection-split-without-annotations",
    ),
    pytest.param(
        TASK,
        f"{{data}}/training/annotations.json names gone.jpg, which is not in {{data}}/training; {FIX}",
        _small(_lose_an_image),
        id="detection-image-missing",
    ),
    pytest.param(
        [*TASK, "--model", "cnn"],
        "--model cnn returns (1, 3) for one image, but --task detection takes a dict of heads on one grid: heatmap "
        "(1, H, W, 3), size (1, H, W, 2), offset (1, H, W, 2); use --model centernet (model/centernet.py)",
        _small(),
        id="detection-model-without-heads",
    ),
]


@pytest.mark.parametrize("args, message, make", REFUSED)
def test_bad_detection_input_stops_in_one_line_before_anything_is_written(
    capsys, place, nothing_starts, args, message, make
):
    check_entry(capsys, place, ["train", "--data-dir", "{data}", *args, "--run-root", "{root}"], message, make)
