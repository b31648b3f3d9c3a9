"""The data formats as one record each (trainer/data/formats.py): every format's built-in pipeline, built
from FORMATS alone, reads the very files the launcher's pre-flight screen screened (with and without a
bad sample left out), and a format registered here alone (a toy one, whose reader, source, writer and
check are this module's) is seen by every table derived from FORMATS: nothing else names formats."""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from catalogue import NOT_AN_IMAGE, dataset, encoded_image, good_records, replace_image, synth_set
from nvidia.dali import pipeline_def

from dali_launch.launcher.data import data_check, datasets, synth
from dali_launch.launcher.route import task_check
from dali_launch.trainer.data import bad_samples, formats, records, sample_scan
from dali_launch.trainer.data import registry as pipelines
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.data.dali import epoch_size
from dali_launch.trainer.data.sample_scan import Listing, Scan, image_problem, stamp
from dali_launch.trainer.errors import UsageError

SKIP = {"bad_samples": "skip", "max_bad_samples": "1"}


def _data(tmp_path: Path, found: formats.Format, spoilt: bool) -> Path:
    """A small data set of `found`: `data synth`'s through its writer, else (an LMDB) catalogue's; training
    sample 1 a text file named .jpg when `spoilt`."""
    if found.writer:
        spoil = lambda root: replace_image(root / "training", found.name, 1, lambda jpeg: NOT_AN_IMAGE)
        return synth_set(found.name, spoil if spoilt else None)(tmp_path)["data"]
    good = good_records(6)
    training = [good[0], good_records(1, NOT_AN_IMAGE)[0], *good[2:]] if spoilt else good
    return dataset(tmp_path, training=training)["data"]


def _read(found: formats.Format, split: Path, settings: dict) -> tuple[dict, int, list]:
    """The built-in pipeline of `found` (its FORMATS reference) built on one CPU shard of `split`: the reader
    arguments its `args.read` was given, the samples DALI's reader reads an epoch, and what it left out."""
    asked = {}

    class Asking(PipelineArgs):  # what the pipeline function asks its reader for, passed on unchanged
        def read(self, reader: str, **kwargs):
            asked.update(reader=reader, kwargs=kwargs)
            return super().read(reader, **kwargs)

    args = Asking(str(split), 0, 1, 2, False, False, "cpu", 0, 10, 32, **settings)
    function = formats.imported(found.pipeline)
    pipe = pipeline_def(lambda: tuple(function(args)), batch_size=2, num_threads=1, device_id=None)()
    pipe.build()
    return asked, epoch_size(pipe, found.name, 0, 1), args.left_out


@pytest.mark.parametrize("spoilt", [False, True], ids=["clean", "one-bad-sample-skipped"])
@pytest.mark.parametrize("found", formats.FORMATS, ids=formats.names())
def test_the_screen_and_the_reader_see_the_same_files(tmp_path, monkeypatch, found, spoilt):
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    if spoilt and not found.skips:  # refused before anything starts, as the launcher's checks refuse it
        with pytest.raises(UsageError, match="--bad-samples skip cannot leave a sample out of"):
            bad_samples.check_mode("skip", found.name)
        return
    split = _data(tmp_path, found, spoilt) / "training"
    reader, screened = formats.reader_of(found.name, split)  # what the launcher's pre-flight screens
    kept, launcher_scan = bad_samples.screen(reader, screened, "skip", "1")
    asked, read, left_out = _read(found, split, SKIP)
    listed = sample_scan.listing(reader, screened)
    if asked:  # a reader that args.read builds; the video reader, which decodes what it reads, screens alike itself
        plain = {k: v for k, v in asked["kwargs"].items() if k != "name" and isinstance(v, (str, list))}  # not DALI's
        assert (asked["reader"], plain) == (reader, screened)
        assert sample_scan.listing(asked["reader"], asked["kwargs"]).fingerprint == listed.fingerprint
    assert read == listed.count - spoilt == len(records.open_source(reader, kept))  # DALI reads what is kept
    assert left_out == ([launcher_scan] if spoilt else [])  # the scan rides with the pipeline, no global


# How each "module:function" a Format names is called (datasets.check, synth's units, pipelines.load; the
# records module's by bad_samples, sample_scan and records/): what a rename or a new parameter would break.
REFERENCES = {"check": ("path", "origin", "num_classes"), "writer": ("unit",), "pipeline": ("args",)}
RECORDS_CALLS = {"source": ("kwargs",), "listing": ("kwargs",), "without": ("kwargs", "scan")}
RECORDS_OPTIONAL = {"native": ("outputs",), "split_keys": ("kwargs",)}  # looked up with getattr(..., None)


@pytest.mark.parametrize("found", formats.FORMATS, ids=formats.names())
def test_every_reference_a_format_names_imports_and_takes_its_call(found):
    """FORMATS names launcher functions (and heavy trainer ones) as "module:function" strings, which the
    trainer may hold but never import: neither the import graph nor a dead-code tool sees them, so a rename
    must break this test rather than a user's run. Each resolves to a callable that binds the call made of it."""
    for field, call in REFERENCES.items():
        reference = getattr(found, field)
        if field == "writer" and not reference:  # a format data synth does not write (mnist: data prepare)
            continue
        function = formats.imported(reference)
        assert callable(function), (field, reference)
        inspect.signature(function).bind(*call)
    if found.fits:  # datasets.check_samples calls it with the data set and the run's [data]
        inspect.signature(formats.imported(found.fits)).bind("path", "data")
    assert pipelines.load(found.name) is formats.imported(found.pipeline)
    module = found.module()
    for name, call in RECORDS_CALLS.items():
        if name == "without" and not found.skips:  # nothing can be left out of its reader
            assert not hasattr(module, name), name
            continue
        inspect.signature(getattr(module, name)).bind(*call)
    for name, call in RECORDS_OPTIONAL.items():
        if hasattr(module, name):
            inspect.signature(getattr(module, name)).bind(*call)


def test_skip_on_an_lmdb_is_refused_in_one_line_before_anything_starts():
    with pytest.raises(UsageError) as e:
        bad_samples.check_mode("skip", "mnist")
    assert str(e.value) == (
        "--bad-samples skip cannot leave a sample out of LMDBs (fn.readers.caffe2 reads every record: they have no "
        "index to leave one out of); re-create the data set without the bad samples (`dali-launch data prepare "
        "--from IDX_DIR --to DIR`), or use --bad-samples stop"
    )
    bad_samples.check_mode("stop", "mnist")
    bad_samples.check_mode("skip", "folders")
    bad_samples.check_mode("skip", "mypkg.pipe:make")  # a pipeline of one's own: its reader's screen decides


# --- a toy format, registered by this test alone ---------------------------------------------------
# Its split: SPLIT/NNNNNNNN-LABEL.toy files of encoded images. Its records module, pipeline, writer and
# check are the functions below, named in the record as formats.py's own are.

HERE = "test_formats"


def _files(root: str) -> list[str]:
    return sorted(str(p) for p in Path(root).glob("*.toy"))


class ToySource:
    def __init__(self, files: list[str]):
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def keys(self) -> list[bytes]:
        return [os.path.basename(f).encode() for f in self.files]

    def read(self, index: int) -> tuple[np.ndarray, int]:
        label = int(Path(self.files[index]).stem.split("-")[1])
        return np.fromfile(self.files[index], np.uint8), label


def source(kwargs: dict) -> ToySource:
    return ToySource(kwargs.get("files") or _files(kwargs["root"]))


def listing(kwargs: dict) -> Listing:
    files = source(kwargs).files
    fingerprint = hashlib.sha256("".join(stamp(f) for f in files).encode()).hexdigest()
    encoded = lambda i: Path(files[i]).read_bytes()
    return Listing(kwargs["root"], len(files), fingerprint, files.__getitem__, lambda i: image_problem(encoded, i))


def without(kwargs: dict, scan: Scan) -> dict:
    bad = {b.index for b in scan.bad}
    return {**kwargs, "files": [f for i, f in enumerate(source(kwargs).files) if i not in bad]}


def toy_pipeline(args):
    raise AssertionError("not built here: the tables are what this test looks at")


def write_toy(unit) -> int:
    total = 0
    for index, jpeg, label in synth.samples(unit):
        (unit.folder / f"{index:08d}-{label}.toy").write_bytes(jpeg)
        total += len(jpeg)
    return total


def check_toy(path: Path, origin: str, num_classes: int) -> None:
    if not _files(str(path / "training")):
        raise UsageError(f"{origin} {path}/training holds no .toy files")


TOY = formats.Format(
    name="toy",
    reader="toy",
    arguments=lambda split: {"root": split},
    detect=lambda split: any(split.glob("*.toy")),
    records=HERE,
    pipeline=f"{HERE}:toy_pipeline",
    holds="toy files",
    layout="folders of .toy files",
    description="SPLIT/<n>-<label>.toy",
    make="make-toy {path}",
    check=f"{HERE}:check_toy",
    crops=False,
    writer=f"{HERE}:write_toy",
)


def test_a_toy_format_registered_alone_is_in_every_derived_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(formats, "FORMATS", (*formats.FORMATS, TOY))
    assert pipelines.pipelines()["toy"] == f"{HERE}:toy_pipeline"
    pipelines.check("toy")  # a built-in name now: nothing imported
    assert "toy" in synth.synth_formats() and "toy" not in task_check.crops() and task_check.flat("toy")
    assert "toy" in records.readers()

    data = tmp_path / "toy"
    synth.synth(synth.SynthSpec(data, "toy", classes=2, train=4, test=2, image_scale=0.05, shard_size=2, workers=1))
    split = data / "training"
    assert formats.detect(split) is TOY and data_check.format_of(data) is TOY
    datasets.check(data, "--data-dir", "toy", 2)  # the toy's own check, through its record
    with pytest.raises(UsageError, match="toy files; make one with `make-toy DIR`"):
        datasets.data_dir_of(None, "toy")
    missing = tmp_path / "none"
    with pytest.raises(UsageError, match=f"does not exist; make it with `make-toy {missing}`"):
        datasets.check(missing, "--data-dir", "toy")

    assert records.fingerprint_of(split)["samples"] == 4
    (split / "00000001-1.toy").write_bytes(encoded_image()[:-200])  # cut short: a bad sample
    assert data_check.check(data, decode=False) == 1
    assert f"{split}/00000001-1.toy is a truncated JPEG" in capsys.readouterr().out
    kept, scan = bad_samples.screen("toy", formats.reader_of("toy", split)[1], "skip", "1")
    assert [b.index for b in scan.bad] == [1] and len(records.open_source("toy", kept)) == 3


def test_the_launcher_prepares_a_built_in_pipeline_without_dali_or_jax(small_lmdb, tmp_path):
    """The launcher's pre-flight checks take a built-in pipeline's word from its name (every one keeps a
    decoded cache, or its format says it does not and the launcher refuses a size), so a `--local` or SLURM launcher
    does not import DALI (0.4 s) or JAX beside its ranks."""
    from dali_launch.trainer.data.contract import Pipeline

    for name, target in pipelines.pipelines().items():
        found = formats.imported(target)
        assert isinstance(found, Pipeline) and found.cacheable == formats.get(name).decodes, name
    args = ["--local", "--processes", "2", "--gpus-per-node", "2", "--dry-run", "--data-dir", str(small_lmdb)]
    argv = [sys.executable, "-X", "importtime", "-m", "dali_launch.launcher.cli", *args, "--run-root", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "dali_launch.launcher.route.prepare" in imported and not imported & {"nvidia.dali", "jax", "flax"}
