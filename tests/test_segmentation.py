"""--task segmentation's parts: `data synth --format segmentation`'s scenes and masks, the pipeline's one crop and
flip for an image and its mask, the loss and the evaluation's sums on padded batches, and what only the task
can see (a pipeline of one's own giving mask ids out of range). Its runs are test_segmentation_runs.py's; the
refusals before anything is written are in the catalogue (test_catalogue_formats.py)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from conftest import REPO, dali_launch
from nvidia.dali import pipeline_def

from dali_launch.launcher.data import synth, synth_scenes, webdataset
from dali_launch.trainer.data import formats, records
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.data.pipelines import MEAN, STD
from dali_launch.trainer.data.segmentation import segmentation as segmentation_pipeline
from dali_launch.trainer.tasks.segmentation import segmentation

GREYS = np.array([30, 100, 170, 240])  # the grey level of each class in the images that encode their masks


def _layout() -> np.ndarray:
    """A 48×64 mask no flip or shift maps onto itself: a band on the left, blocks top right and bottom."""
    mask = np.zeros((48, 64), np.uint8)
    mask[:, :16], mask[:20, 40:], mask[32:, 24:48] = 1, 2, 3
    return mask


def _encoding_set(split) -> None:
    """Samples whose image is its mask's classes as grey levels (a JPEG of grey holds them almost exactly)."""
    from PIL import Image

    split.mkdir(parents=True)
    samples = []
    for i in range(8):
        mask, image, png = _layout(), io.BytesIO(), io.BytesIO()
        Image.fromarray(np.repeat(GREYS[mask].astype(np.uint8)[..., None], 3, -1)).save(image, "JPEG", quality=100)
        Image.fromarray(mask, mode="L").save(png, "PNG")
        samples.append((i, image.getvalue(), png.getvalue()))
    webdataset.write(split / "shard-00000.tar", samples, formats.SEGMENTATION_EXT)


def _interior(masks: np.ndarray) -> np.ndarray:
    """The pixels whose 3×3 neighbourhood holds one class and lies inside the crop: off the edges that
    interpolation blends, and off the crop's frame, where the image's resize reads pixels beyond the window."""
    padded, (_, h, w) = np.pad(masks.astype(np.int64), ((0, 0), (1, 1), (1, 1)), constant_values=-1), masks.shape
    same = np.ones(masks.shape, bool)
    for dy in range(3):
        for dx in range(3):
            same &= padded[:, dy : dy + h, dx : dx + w] == masks
    return same


def _batches(split, training: bool, count: int):
    args = PipelineArgs(str(split), 0, 1, 8, training, False, "cpu", 0, 4, 32)
    pipe = pipeline_def(lambda: tuple(segmentation_pipeline(args)), batch_size=8, num_threads=1, device_id=None)()
    pipe.build()
    for _ in range(count):
        images, masks = (np.array(out.as_tensor()) for out in pipe.run())
        yield images, masks


def test_one_crop_and_flip_reach_an_image_and_its_mask(tmp_path):
    """Every pixel off an edge of the crops reads, from the image, the class its mask gives it: the random
    window and the coin are one draw for both. The mask flipped alone, or shifted by one pixel, would not."""
    _encoding_set(tmp_path / "training")
    flips, windows = [], set()
    for images, masks in _batches(tmp_path / "training", True, 6):
        assert images.shape == (8, 32, 32, 3) and images.dtype == np.float32
        assert masks.shape == (8, 32, 32) and masks.dtype == np.int32 and set(np.unique(masks)) <= {0, 1, 2, 3}
        read = np.abs((images[..., 0] * STD[0] + MEAN[0])[..., None] - GREYS).argmin(-1)
        inside = _interior(masks)
        assert inside.mean() > 0.6 and (read == masks)[inside].all()
        assert (read == masks[:, :, ::-1])[_interior(masks[:, :, ::-1])].mean() < 0.7  # a flip shows
        assert (read[:, :, 1:] == masks[:, :, :-1])[inside[:, :, :-1]].mean() < 0.999  # so does one pixel
        flips += [(m == 1).nonzero()[1].mean() > 16 for m in masks if (m == 1).any()]  # the band on the right
        windows |= {m.tobytes() for m in masks}
    assert 0.2 < np.mean(flips) < 0.8 and len(windows) > 40, (np.mean(flips), len(windows))
    plain = [masks for _, masks in _batches(tmp_path / "training", False, 2)]
    assert (plain[0] == plain[1]).all() and (plain[0] == plain[0][:1]).all()  # evaluation: nothing random
    assert (plain[0][0, :, :8] == 1).all() and (plain[0][0, :, 8:] != 1).all()  # 16 of 64 columns: 8 of 32


def test_synth_scenes_are_masks_of_every_class_and_their_images(tmp_path):
    """What --format segmentation writes: a JPEG and a grey PNG of its size a sample, every class in the
    masks, the same bytes for the same seed; read back by the record source as the reader reads them."""
    from PIL import Image

    spec = synth.SynthSpec(tmp_path / "out", "segmentation", classes=5, train=12, test=4, image_scale=0.1, workers=1)
    synth.synth(spec)
    split = tmp_path / "out" / "training"
    assert formats.detect(split) is formats.get("segmentation")
    tars, _ = formats.shard_files(split, ".tar")
    seen = set()
    for name, jpg, png in webdataset.read_samples(tars[0], formats.SEGMENTATION_EXT):
        mask, image = Image.open(io.BytesIO(png)), Image.open(io.BytesIO(jpg))
        assert (mask.format, mask.mode, image.format, mask.size) == ("PNG", "L", "JPEG", image.size)
        seen |= set(np.unique(np.asarray(mask)).tolist())
        assert (jpg, png) == synth_scenes.scene(0, "training", int(name), 5, 0.1)
    assert seen == {0, 1, 2, 3, 4}
    source = records.source_of(split)  # --sample-order global's, and `data check --decode`'s
    assert source.encoded_second and len(source) == 12 and bytes(source.read(3)[1]) == png_of(tars[0], 3)


def png_of(tar, index: int) -> bytes:
    return webdataset.read_samples(tar, formats.SEGMENTATION_EXT)[index][2]


class _Step:
    """What the task's functions use of the step view: the model (these logits, whatever the input) and `valid`."""

    def __init__(self, logits, valid):
        self.logits, self.valid = logits, valid

    def model(self, images):
        return self.logits


def test_padding_counts_in_neither_the_loss_nor_the_evaluation():
    """Two real images and a padding row that repeats the second: the padding changes no sum. Per class, the
    intersection and union of prediction and truth; mean IoU over the classes present, pixel accuracy."""
    import jax
    import jax.numpy as jnp

    task = segmentation(num_classes=3)
    masks = jnp.array([[[0, 1], [1, 1]], [[2, 2], [0, 0]], [[2, 2], [0, 0]]], jnp.int32)
    predicted = jnp.array([[[0, 1], [1, 0]], [[2, 0], [0, 0]], [[1, 1], [1, 1]]])
    logits = jax.nn.one_hot(predicted, 3) * 5.0
    valid = jnp.array([1.0, 1.0, 0.0])
    sums = task.evaluate(_Step(logits, valid), {"images": None, "masks": masks})
    assert sums["intersection"].tolist() == [3, 2, 1] and sums["union"].tolist() == [5, 3, 2] and sums["pixels"] == 8
    summary = task.summary({name: np.asarray(value) for name, value in sums.items()} | {"count": 2.0})
    assert summary == pytest.approx({"miou": (3 / 5 + 2 / 3 + 1 / 2) / 3, "pixel_accuracy": 6 / 8})
    loss, metrics = task.loss(_Step(logits, valid), {"images": None, "masks": masks})
    real, _ = task.loss(_Step(logits[:2], valid[:2]), {"images": None, "masks": masks[:2]})
    assert float(loss) == pytest.approx(float(real)) and float(metrics["pixel_accuracy"]) == pytest.approx(
        3 / 4 + 3 / 4
    )
    absent = task.summary({"intersection": np.array([4.0, 0.0]), "union": np.array([4.0, 0.0]), "pixels": 4.0})
    assert absent["miou"] == 1.0  # a class neither present nor predicted does not count


def test_a_pipeline_of_ones_own_giving_mask_ids_out_of_range_stops_in_one_line(tmp_path):
    """The launcher reads the masks of a built-in data set (the catalogue's entry); a pipeline of one's own is
    read first by the task, whose bounds catch a class id past --num-classes at the loop's first check."""
    data = tmp_path / "five"
    synth.synth(synth.SynthSpec(data, "segmentation", classes=5, train=16, test=8, image_scale=0.1, workers=1))
    proc = dali_launch(
        *["train", "--task", "segmentation", "--pipeline", "unaugmented_pipelines:segmentation"],
        *["--data-dir", str(data), "--num-classes", "4", "--image-size", "16", "--batch-size", "8", "--epochs", "1"],
        *["--run-root", str(tmp_path / "runs")],
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    message = (
        "--num-classes 4 but --pipeline unaugmented_pipelines:segmentation gave a training mask of class id 4; "
        "use --num-classes 5 or more"
    )
    assert (proc.returncode, proc.stderr) == (2, f"dali-launch: error: {message}\n"), proc.stderr[-3000:]
