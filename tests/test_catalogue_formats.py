"""The catalogue of bad inputs, the formats besides the Caffe2 LMDB: JPEG folders, TFRecord and WebDataset
shards that are empty, unindexed, corrupt or stale, labels out of range, and samples DALI cannot decode
(found before the job from headers and last bytes). Each ends with one exact line on stderr and exit code 2,
nothing written, nothing started (see catalogue.py); the LMDB entries are test_catalogue_data.py's.
"""

from __future__ import annotations

import pytest
from catalogue import NOT_AN_IMAGE, broken_sample, check_entry, class_folders, one_bad, synth_set

from dali_launch.launcher.data import idx

FORMATS = [
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "folders", "--num-classes", "2"],
        "{data} has 3 classes but --num-classes is 2; pass --num-classes 3",
        class_folders(3),
        id="folders-more-than-num-classes",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "unaugmented_pipelines:tfrecord", "--decoded-cache", "512"],
        "--decoded-cache 512 keeps what args.decode(...) decodes, and --pipeline unaugmented_pipelines:tfrecord "
        "does not say it decodes so; wrap it in Pipeline(function, cacheable=True), or use --decoded-cache off",
        None,
        id="decoded-cache-pipeline-not-cacheable",
    ),
    pytest.param(
        ["--pipeline", "tfrecord"],
        "--pipeline tfrecord needs --data-dir, a folder holding training/ and testing/ shards; "
        "make one with `dali-launch data synth DIR --format tfrecord`",
        None,
        id="tfrecord-without-data-dir",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "webdataset"],
        "{data}/testing holds no *.tar shards for --pipeline webdataset; "
        "re-create the data set with `dali-launch data synth OUT --format webdataset`",
        synth_set("webdataset", lambda root: [p.unlink() for p in (root / "testing").iterdir()]),
        id="webdataset-split-without-shards",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "tfrecord"],
        "{data}/training holds no *.tfrecord shards for --pipeline tfrecord; "
        "re-create the data set with `dali-launch data synth OUT --format tfrecord`",
        synth_set("webdataset"),
        id="tfrecord-pipeline-on-webdataset-shards",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "tfrecord"],
        "{data}/training/shard-00001.tfrecord has no DALI index shard-00001.idx beside it; "
        "re-create the data set with `dali-launch data synth OUT --format tfrecord`",
        synth_set("tfrecord", lambda root: (root / "training" / "shard-00001.idx").unlink()),
        id="tfrecord-index-missing",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "tfrecord"],
        "{data}/training/shard-00000.tfrecord is corrupt or does not match shard-00000.idx (the record at "
        "byte 0 fails its CRC); re-create the data set with `dali-launch data synth OUT --format tfrecord`",
        synth_set("tfrecord", lambda root: _flip_byte(root / "training" / "shard-00000.tfrecord", 100)),
        id="tfrecord-crc",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "tfrecord"],
        "{data}/testing/shard-00000.tfrecord is corrupt or does not match shard-00000.idx (the index lists "
        "other records than the file holds); re-create the data set with "
        "`dali-launch data synth OUT --format tfrecord`",
        synth_set("tfrecord", lambda root: _drop_last_line(root / "testing" / "shard-00000.idx")),
        id="tfrecord-index-stale",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "webdataset"],
        "{data}/training/shard-00000.tar is corrupt or does not match shard-00000.idx (it announces 4 "
        "samples but lists 3); re-create the data set with `dali-launch data synth OUT --format webdataset`",
        synth_set("webdataset", lambda root: _drop_last_line(root / "training" / "shard-00000.idx")),
        id="webdataset-index-stale",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "webdataset", "--num-classes", "2"],
        "--num-classes 2 but sample 000002 of {data}/training/shard-00000.tar has label 2; use --num-classes 3 or more",
        synth_set("webdataset"),
        id="webdataset-label-out-of-range",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "webdataset", "--num-classes", "2"],
        "--num-classes 2 but sample 000003 of {data}/training/shard-00000.tar has label 3; use --num-classes 4 or more",
        synth_set("webdataset", classes=4),
        id="webdataset-num-classes-names-the-largest-label",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "tfrecord", "--num-classes", "2"],
        "--num-classes 2 but record 3 of {data}/training/shard-00000.tfrecord has label 3; use --num-classes 4 or more",
        synth_set("tfrecord", classes=4),
        id="tfrecord-num-classes-names-the-largest-label",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--pipeline", "tfrecord", "--num-classes", "2"],
        "--num-classes 2 but record 2 of {data}/training/shard-00000.tfrecord has label 2; use --num-classes 3 or more",
        synth_set("tfrecord"),
        id="tfrecord-label-out-of-range",
    ),
    *[
        pytest.param(["--task", "segmentation", *args], message, make, id=f"segmentation-{name}")
        for name, args, message, make in [
            (
                "without-data-dir",
                [],
                "--pipeline segmentation needs --data-dir, a folder holding training/ and testing/ shards of images "
                "with masks; make one with `dali-launch data synth DIR --format segmentation`",
                None,
            ),
            (
                "mask-id-out-of-range",
                ["--data-dir", "{data}", "--num-classes", "2"],
                "--num-classes 2 but the mask of sample 000000 of {data}/training/shard-00000.tar has class id 2; "
                "use --num-classes 3 or more",
                synth_set("segmentation"),
            ),
            (
                "mask-not-grey",
                ["--data-dir", "{data}", "--num-classes", "3"],
                "the mask of sample 000001 of {data}/training/shard-00000.tar is a PNG of mode RGB; a mask is an "
                "8-bit grey PNG of class ids, its image's size",
                synth_set("segmentation", lambda root: _change_mask(root / "training", 1, "RGB")),
            ),
            (
                "model-not-per-pixel",
                ["--data-dir", "{data}", "--num-classes", "3", "--model", "cnn"],
                "--model cnn returns (1, 3) for one sample, but --task segmentation takes per-pixel logits (1, "
                "height, width, 3); use --model unet, or a model whose last layer is a 3-wide convolution",
                synth_set("segmentation"),
            ),
            (
                "augment",
                ["--data-dir", "{data}", "--num-classes", "3", "--augment", "trivialaugment"],
                "--augment trivialaugment moves and warps an image's pixels, not its masks: --pipeline segmentation "
                "takes none; use --augment none",
                synth_set("segmentation"),
            ),
            (
                "mixup",
                ["--data-dir", "{data}", "--num-classes", "3", "--mixup", "0.2"],
                "--mixup 0.2: mixing is for classification targets; --task segmentation takes none, leave it out",
                synth_set("segmentation"),
            ),
        ]
    ],
]


def _change_mask(split, sample: int, mode: str) -> None:
    """Sample `sample`'s mask of a `data synth --format segmentation` split converted to `mode` (a colour PNG)."""
    import io

    from PIL import Image

    from dali_launch.launcher.data import webdataset
    from dali_launch.trainer.data.formats import SEGMENTATION_EXT

    def changed(png: bytes) -> bytes:
        out = io.BytesIO()
        Image.open(io.BytesIO(png)).convert(mode).save(out, format="PNG")
        return out.getvalue()

    shard = split / "shard-00000.tar"
    found = webdataset.read_samples(shard, SEGMENTATION_EXT)
    webdataset.write(shard, [(int(b), j, changed(p) if int(b) == sample else p) for b, j, p in found], SEGMENTATION_EXT)


def _flip_byte(path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))


def _drop_last_line(path) -> None:
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))


@pytest.mark.parametrize("args, message, make", FORMATS)
def test_formats(capsys, place, nothing_starts, args, message, make):
    check_entry(capsys, place, ["train", *args, "--run-root", "{root}"], message, make)


# --- images DALI cannot decode: found before the job from headers and last bytes ------------------------

SKIP = "replace or remove it, or pass --bad-samples skip to train without it"
NOT_DECODED = "is not an image DALI decodes (JPEG, PNG, BMP, TIFF, WebP, PNM, JPEG 2000)"
CUT = "is a truncated JPEG (it does not end with the end-of-image marker)"
BAD_SAMPLES = [
    pytest.param(
        ["--pipeline", "folders", "--num-classes", "3"],
        f"{{data}}/training/1/00000001.jpg {NOT_DECODED}; {SKIP}",
        broken_sample("folders", "text"),
        id="folders-text-file-named-jpg",
    ),
    pytest.param(
        ["--pipeline", "folders", "--num-classes", "3"],
        f"{{data}}/testing/2/00000002.jpg {CUT}; {SKIP}",
        broken_sample("folders", "truncated", sample=2, split="testing"),
        id="folders-truncated-jpeg",
    ),
    pytest.param(
        ["--pipeline", "tfrecord", "--num-classes", "3"],
        f"record 1 of {{data}}/training/shard-00000.tfrecord {NOT_DECODED}; {SKIP}",
        broken_sample("tfrecord", "text"),
        id="tfrecord-text-file-named-jpg",
    ),
    pytest.param(
        ["--pipeline", "tfrecord", "--num-classes", "3"],
        f"record 2 of {{data}}/training/shard-00000.tfrecord {CUT}; {SKIP}",
        broken_sample("tfrecord", "truncated", sample=2),
        id="tfrecord-truncated-jpeg",
    ),
    pytest.param(
        ["--pipeline", "webdataset", "--num-classes", "3"],
        f"sample 000001 of {{data}}/training/shard-00000.tar {NOT_DECODED}; {SKIP}",
        broken_sample("webdataset", "text"),
        id="webdataset-text-file-named-jpg",
    ),
    pytest.param(
        ["--pipeline", "webdataset", "--num-classes", "3"],
        f"sample 000002 of {{data}}/training/shard-00000.tar {CUT}; {SKIP}",
        broken_sample("webdataset", "truncated", sample=2),
        id="webdataset-truncated-jpeg",
    ),
    pytest.param(
        ["--pipeline", "folders", "--num-classes", "3", "--bad-samples", "skip", "--max-bad-samples", "0"],
        f"1 of the 6 samples of {{data}}/training are bad (the first: {{data}}/training/1/00000001.jpg "
        f"{NOT_DECODED}), more than --max-bad-samples 0 allows; replace them, or raise --max-bad-samples",
        broken_sample("folders", "text"),
        id="skip-past-max-bad-samples",
    ),
    pytest.param(
        ["--bad-samples", "skip"],
        "--bad-samples skip cannot leave a sample out of LMDBs (fn.readers.caffe2 reads every record: they have no "
        "index to leave one out of); re-create the data set without the bad samples (`dali-launch data prepare "
        "--from IDX_DIR --to DIR`), or use --bad-samples stop",
        one_bad(idx.caffe2_record(NOT_AN_IMAGE, 1)),
        id="skip-on-an-lmdb",
    ),
    pytest.param(
        ["--pipeline", "webdataset", "--num-classes", "3", "--bad-samples", "skip", "--max-bad-samples", "1.5"],
        "--max-bad-samples 1.5 is neither a fraction of the split (0 to 1) nor a count; write e.g. 0.001 or 10",
        broken_sample("webdataset", "text"),
        id="max-bad-samples-not-a-count",
    ),
]


@pytest.mark.parametrize("command", [["train"], ["--local", "--gpus-per-node", "2", "--processes", "2"]])
@pytest.mark.parametrize("args, message, make", BAD_SAMPLES)
def test_bad_samples(capsys, place, nothing_starts, command, args, message, make):
    """Under `train` and a 2-process --local job alike: one line naming the sample, before anything starts."""
    check_entry(capsys, place, [*command, *args, "--data-dir", "{data}", "--run-root", "{root}"], message, make)
