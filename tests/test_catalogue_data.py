"""The catalogue of bad inputs: data sets that are missing, unreadable, truncated, corrupt,
undecodable or of mixed image sizes. Each ends with one exact line on stderr and exit code 2, nothing
written, no job submitted, no device taken (see catalogue.py). The two permission entries run the CLI
as root without CAP_DAC_OVERRIDE (setpriv), so the kernel, not a mock, refuses the access.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from catalogue import (
    ERROR,
    NOT_AN_IMAGE,
    a_file,
    broken_sample,
    check_entry,
    class_folders,
    dataset,
    empty_folder,
    encoded_image,
    good_records,
    label_record,
    not_lmdb,
    one_bad,
    raw_pixels,
    snapshot,
    synth_set,
    truncated,
)
from conftest import REPO

from dali_launch.launcher.data import datasets, idx

DATA = [
    pytest.param(
        ["--data-dir", "{tmp}/nope"],
        "--data-dir {tmp}/nope does not exist; make it with `dali-launch data prepare --from IDX_DIR --to {tmp}/nope`",
        None,
        id="data-dir-missing",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "--data-dir {data} is a file; point it at the folder holding training/ and testing/",
        a_file,
        id="data-dir-is-a-file",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "--data-dir {data} holds neither training/ nor testing/; a data set needs "
        "both training/ and testing/ LMDBs (as `dali-launch data prepare` makes them)",
        empty_folder,
        id="data-dir-empty",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "--data-dir {data} has no testing/; a data set needs both training/ and "
        "testing/ LMDBs (as `dali-launch data prepare` makes them)",
        lambda tmp: dataset(tmp, splits=("training",)),
        id="testing-missing",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "{data}/training is not an LMDB (no data.mdb); --data-dir must hold "
        "training/ and testing/ as made by `dali-launch data prepare`",
        lambda tmp: dataset(tmp, training=None, splits=("testing",), empty=("training",)),
        id="split-not-an-lmdb",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "{data}/training is not a readable LMDB ({data}/training: MDB_INVALID: "
        "File is not an LMDB file); re-create it with `dali-launch data prepare`",
        not_lmdb,
        id="data-mdb-garbage",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "{data}/training/data.mdb is truncated ({have} of {need} bytes); copy it "
        "again or re-create it with `dali-launch data prepare`",
        truncated,
        id="lmdb-truncated",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "{data}/training holds no records; point --data-dir at a non-empty data set",
        lambda tmp: dataset(tmp, training=[]),
        id="data-set-empty",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training is corrupt (truncated field); "
        "re-create the data set with `dali-launch data prepare`",
        one_bad(b"\x0a\x05junk"),
        id="record-corrupt",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training is corrupt (the image is not an "
        "encoded image (JPEG, PNG, BMP, TIFF, WebP, GIF)); re-create the data set with "
        "`dali-launch data prepare`",
        one_bad(idx.caffe2_record(b"garbage" * 30, 1)),
        id="image-not-an-image",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training is a GIF, which DALI's image decoder "
        "does not read; re-create the data set with `dali-launch data prepare` (it writes JPEGs)",
        one_bad(idx.caffe2_record(encoded_image("GIF"), 1)),
        id="image-gif",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training is not a readable JPEG (its header "
        "ends before the image size); re-create the data set with `dali-launch data prepare` (it writes "
        "JPEGs)",
        one_bad(idx.caffe2_record(b"\xff\xd8" + b"garbage" * 30, 1)),
        id="image-jpeg-garbage",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training is a truncated JPEG (it does not end "
        "with the end-of-image marker); re-create the data set with `dali-launch data prepare` (it writes "
        "JPEGs)",
        one_bad(idx.caffe2_record(encoded_image()[:-10], 1)),
        id="image-jpeg-truncated",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training holds raw pixels, but the pipeline "
        "decodes encoded images; re-create the data set with `dali-launch data prepare`",
        one_bad(raw_pixels()),
        id="image-raw-pixels",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training is a 32×32 image but the records "
        "before it are 28×28; the model takes one image size, so resize them",
        one_bad(idx.caffe2_record(encoded_image("PNG", 32), 1)),
        id="image-sizes-mixed",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "{data}/testing holds 32×32 images but {data}/training 28×28; the model "
        "takes one image size, so re-create one of them",
        lambda tmp: dataset(tmp, testing=good_records(image=encoded_image("JPEG", 32))),
        id="split-sizes-differ",
    ),
    # Labels: out of range, one_hot makes a zero row and the run ends with exit 0 having learnt nothing.
    pytest.param(
        ["--data-dir", "{data}"],
        "--num-classes 10 but record 00000001 of {data}/training has label 12; use --num-classes 13 or more",
        one_bad(label_record(12)),
        id="label-too-large",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training has label -1; labels are class ids "
        "from 0, so re-create the data set with `dali-launch data prepare`",
        one_bad(label_record(-1)),
        id="label-negative",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "--num-classes 10 but record 00000000 of {data}/testing has label 99; use --num-classes 100 or more",
        lambda tmp: dataset(tmp, testing=[label_record(99)] * 4),
        id="label-too-large-in-testing",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--num-classes", "5"],
        "--num-classes 5 but record 00000009 of {data}/training has label 9; use --num-classes 10 or more",
        lambda tmp: dataset(tmp, training=good_records(10)),
        id="num-classes-too-small",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training is corrupt (its label holds 2 values "
        "(1, 2); the reader takes one class id per record); re-create the data set with "
        "`dali-launch data prepare`",
        one_bad(label_record(1, 2)),
        id="label-two-values",
    ),
    pytest.param(
        ["--data-dir", "{data}"],
        "record 00000001 of {data}/training has label 2.5, not a class id; "
        "re-create the data set with `dali-launch data prepare`",
        one_bad(label_record(2.5, kind=1)),
        id="label-float-not-whole",
    ),
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
]


def _flip_byte(path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))


def _drop_last_line(path) -> None:
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))


@pytest.mark.parametrize("args, message, make", DATA)
def test_data(capsys, place, nothing_starts, args, message, make):
    check_entry(capsys, place, ["train", *args, "--run-root", "{root}"], message, make)


def _without_dac(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI as root minus the capabilities that bypass file permissions: the kernel checks them."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux)")
    return subprocess.run(
        [
            "setpriv",
            "--bounding-set=-dac_override,-dac_read_search",
            "--",
            sys.executable,
            "-m",
            "dali_launch.launcher.cli",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "args, message, mode",
    [
        pytest.param(
            ["train", "--data-dir", "{data}", "--run-root", "{root}"],
            "--data-dir {data} is not readable; fix its permissions",
            "data",
            id="data-dir-unreadable",
        ),
        pytest.param(
            ["train", "--data-dir", "{data}", "--run-root", "{tmp}/locked/runs"],
            "cannot write in --run-root "
            "{tmp}/locked/runs: {tmp}/locked is not writable for this user; choose a writable folder",
            "locked",
            id="run-root-unwritable",
        ),
    ],
)
def test_permissions(place, args, message, mode):
    folder, fill = place
    args, message = fill(args, message, None)
    target = folder / mode
    target.mkdir(exist_ok=True)
    target.chmod(0o000 if mode == "data" else 0o555)
    try:
        before = snapshot(folder)
        proc = _without_dac(args)
        assert (proc.returncode, proc.stderr) == (2, f"{ERROR}{message}\n")
        assert snapshot(folder) == before and not (folder / "runs").exists()
    finally:
        target.chmod(0o755)


# --- what the catalogue does not refuse -------------------------------------------------------------


def test_png_records_are_fine(tmp_path):
    """DALI decodes PNG (and BMP, TIFF, WebP) as well as JPEG: a set of 28×28 PNGs passes the checks, and DALI's
    own reader and decoder read it as the pipeline does."""
    from nvidia.dali import fn, pipeline_def, types

    data = dataset(
        tmp_path, training=good_records(image=encoded_image("PNG")), testing=good_records(image=encoded_image("BMP"))
    )["data"]
    datasets.check(data, "--data-dir")

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def read(path):
        images, _ = fn.readers.caffe2(path=path)
        return fn.decoders.image(images, device="cpu", output_type=types.GRAY)

    for split in ("training", "testing"):
        pipe = read(str(data / split))
        pipe.build()
        (images,) = pipe.run()
        assert images.as_tensor().shape() == [4, 28, 28, 1]


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
