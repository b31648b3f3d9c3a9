"""The catalogue of bad inputs: Caffe2 LMDB data sets that are missing, unreadable, truncated, corrupt,
undecodable, of mixed image sizes or labels out of range (the other formats and undecodable samples:
test_catalogue_formats.py). Each ends with one exact line on stderr and exit code 2, nothing
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
    a_file,
    check_entry,
    dataset,
    empty_folder,
    encoded_image,
    good_records,
    label_record,
    not_lmdb,
    one_bad,
    raw_pixels,
    snapshot,
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
    # a step larger than the whole set: one step an epoch, mostly padding, after a whole start-up
    pytest.param(
        ["--data-dir", "{data}", "--global-batch-size", "8"],
        "--global-batch-size 8 is larger than the 4 training samples of {data}/training; use --global-batch-size 4 "
        "or less, or a larger data set",
        None,
        id="global-batch-larger-than-the-data-set",
    ),
    pytest.param(
        ["--data-dir", "{data}", "--gpus-per-node", "3", "--batch-size", "2"],
        "--batch-size 2 on 3 devices (a global batch of 6) is larger than the 3 training samples of "
        "{data}/training; use --batch-size 1 or less, or a larger data set",
        lambda tmp: dataset(tmp, training=good_records(3)),
        id="per-device-batch-larger-than-the-data-set",
    ),
]


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
