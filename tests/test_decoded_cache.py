"""--decoded-cache: the data plan's rule (plan/data.py), memory.py's estimate, and the pipelines with the host cache giving the
same samples in the same order as without it (data/decoded_cache.py); its kind kept across a resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
import pytest
from plans import decided

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import dali, memory, shards
from dali_launch.trainer.data.batches import Readers
from dali_launch.trainer.data.memory import Room
from dali_launch.trainer.plan import data as data_plan
from dali_launch.trainer.plan.data import decoded_cache
from dali_launch.trainer.resilience import saved, start_point
from dali_launch.trainer.resilience.checkpoint import Checkpointer
from dali_launch.trainer.run_dir import RunPaths

ROOM = Room(split_mb=1000, host_mb=600, device_mb=20_000)


@pytest.fixture
def auto_keeps_both(monkeypatch):
    """The fit rule of a kind auto may keep: both kinds allowed, as a measurement that found them faster would."""
    both = (data_plan.HOST, data_plan.DECODER)
    monkeypatch.setattr(data_plan, "AUTO_KINDS", {"cpu": both, "gpu": both})


def _rule(setting="auto", decoder="cpu", share=0.5, room=ROOM, kept=None, order="shards", cacheable=True, whole=False):
    data = DataConfig(decoded_cache=setting, sample_order=order)
    platform = "cpu" if decoder == "cpu" else "gpu"
    return decoded_cache(data, decoder, cacheable, room.shared(share), kept, platform, whole)


def test_auto_keeps_the_decoded_shards_where_they_fit(auto_keeps_both):
    assert _rule()[:2] == ("host", 500)  # half the split, on this process, in 600 MiB
    assert _rule(share=0.7)[0] == "off" and "~700 MiB decoded would not fit in the 600 MiB" in _rule(share=0.7)[2]
    assert _rule("1000", decoder="mixed", share=0.25)[:2] == ("decoder", 313)  # a device's 250 MiB, a quarter spare
    assert _rule(decoder="mixed", share=0.25)[:2] == ("decoder", 313)
    assert _rule(decoder="mixed", share=1, room=Room(1000, 600, 900))[0] == "off"
    assert _rule(room=Room())[2] == "off (the decoded size of the data set is unknown: a format records/ does not read)"


def test_auto_turns_on_only_the_kinds_the_measurements_chose(monkeypatch):
    """plan/data.py's AUTO_KINDS is the one line a measurement changes: a kind left out is off under auto, not under a SIZE."""
    monkeypatch.setattr(data_plan, "AUTO_KINDS", {"cpu": (), "gpu": (data_plan.DECODER,)})
    assert _rule() == (
        "off",
        0,
        "off (auto: no host cache was measured faster than decoding on CPUs; --decoded-cache SIZE keeps one)",
    )
    assert _rule("512")[:2] == ("host", 500) and _rule(decoder="mixed", share=0.25)[0] == "decoder"


def test_auto_keeps_whole_images_in_dalis_decoder_cache_on_gpus():
    """A pipeline that decodes whole images anyway (the tasks' own: views, segmentation, detection) loses nothing to
    DALI's decoder cache, only the decoding after the first epoch: auto keeps one where it fits, on GPUs alone."""
    assert _rule(decoder="mixed", share=0.25, whole=True)[:2] == ("decoder", 313)
    assert _rule(decoder="mixed", share=1, room=Room(1000, 600, 900), whole=True)[0] == "off"  # it does not fit
    assert _rule(decoder="mixed", whole=True, setting="off")[0] == "off"
    assert _rule(decoder="mixed", share=0.25)[0] == "off"  # a pipeline that crops while decoding: not measured
    assert _rule(whole=True)[0] == "off"  # the host table lost on CPUs, whole images or not
    from dali_launch.trainer.data import contract, pipelines, segmentation, views

    assert contract.decodes_whole_images(views.views) and contract.decodes_whole_images(segmentation.segmentation)
    assert contract.decodes_whole_images(pipelines.detection) and not contract.decodes_whole_images(pipelines.folders)


MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "against"
MACHINES = {"cpu": "cpu-2core", "gpu": "h200"}  # where each platform's run was measured


def measured(platform: str) -> dict:
    """The `decoded-cache` run of benchmarks/against.py on the platform's machine, as the script wrote it."""
    doc = json.loads((MEASURED / f"{MACHINES[platform]}.json").read_text())
    return next(e for e in (doc if isinstance(doc, list) else [doc]) if e.get("name") == "decoded-cache")["result"]


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_auto_never_picks_a_kind_its_measurement_found_slower(platform):
    """benchmarks/against.py's runs of the MNIST MLP (benchmarks/results/against/MACHINE.json, the run named
    `decoded-cache`): every kind a run resolved to, its mean epoch; the kinds AUTO_KINDS turns on are exactly
    those faster than decoding every epoch (off)."""
    doc = measured(platform)
    epochs = {}  # this code's runs with no flags (head) or only --decoded-cache (the other kinds)
    for row in (r for r in doc["rows"] if r["name"] == "head" or r["flags"][:1] == ["--decoded-cache"]):
        for run in (r for r in row["runs"] if r["pass"] >= 0 and "train_s" in r):
            epochs.setdefault(run["decoded_cache"], []).extend(run["train_s"][1:])
    mean = {kind: sum(s) / len(s) for kind, s in epochs.items()}
    assert "off" in mean and len(mean) > 1, f"the runs measured only {sorted(mean)}"
    faster = {kind for kind, s in mean.items() if kind != "off" and s < mean["off"]}
    assert set(data_plan.AUTO_KINDS[platform]) & set(mean) == faster, mean


def test_off_global_order_and_pipelines_that_do_not_say_so_keep_nothing():
    assert _rule("off") == ("off", 0, "off (--decoded-cache off)")
    assert _rule(order="global") == ("off", 0, "off (--sample-order global)")
    assert _rule(cacheable=False)[:2] == ("off", 0)


def test_a_size_bounds_the_host_table_and_sizes_the_decoder_cache():
    assert _rule("400M")[0] == "off" and _rule("2G")[:2] == ("host", 500)
    assert _rule("4096", decoder="mixed", share=1, room=Room())[:2] == ("decoder", 4096)  # partial: DALI fills it
    assert _rule("100", decoder="mixed", share=1)[:2] == ("decoder", 100)


def test_a_resumed_run_keeps_its_checkpoints_kind():
    """Another kind is another DALI graph, which the checkpoint's states do not fit: fit or not, it stays."""
    assert _rule(share=0.9, kept="host")[0] == "host"
    assert _rule(kept="off") == ("off", 0, "off (the checkpoint resumed was written without one)")


@pytest.mark.parametrize("bad", ["12X", "0", "-5", "G"])
def test_sizes_parse_or_refuse(bad):
    assert [DataConfig(decoded_cache=v).decoded_cache_mb() for v in ("auto", "off", "512", "512M", "3g")] == [
        None,
        0,
        512,
        512,
        3072,
    ]
    with pytest.raises(ValueError):
        DataConfig(decoded_cache=bad).decoded_cache_mb()


def test_the_estimate_reads_headers_not_pixels(mnist_lmdb):
    """8,000 28x28 images, counted as 3 channels: the upper bound for RGB output."""
    assert memory.decoded_split_mb(mnist_lmdb / "training") == pytest.approx(8000 * 28 * 28 * 3 / 2**20)
    assert memory.decoded_split_mb(mnist_lmdb / "nothing") is None
    assert memory.host_room_mb(2) > 0


def _epochs(path, cache: str, epochs: int, **data_config) -> tuple[list, object]:
    """Every batch of `epochs` epochs of a training pipeline (mnist's unless told), 2 readers on one CPU device."""
    devices = jax.local_devices(backend="cpu")[:1]
    sharding = shards.Sharding(0, 1, 1, 2)
    config = DataConfig(decoder="cpu", reader_threads=1, decoded_cache=cache, output_dtype="float32", **data_config)
    start = dali.Start("shards", 0, 1, 50, 2)
    data = dali.build(
        dali.Split(str(path), True, 100), Readers(devices, devices, sharding), decided(config), start=start
    )
    batches = [{k: np.asarray(v) for k, v in data.next().items()} for _ in range(epochs * data.steps)]
    return batches, data


def test_the_host_cache_gives_the_same_samples_in_the_same_order(small_lmdb):
    """The same pixels, labels and padding masks call by call, over two epochs (the readers reshuffle), with
    2 readers: the table holds each sample of the process's shards once, decoded."""
    plain, _ = _epochs(small_lmdb / "training", "off", 2)
    cached, data = _epochs(small_lmdb / "training", "64", 2)
    assert data.host_cache is not None and len(data.host_cache.table) == 800
    assert data.host_cache.nbytes == 800 * 28 * 28  # grey: one byte a pixel
    assert len(plain) == len(cached) == 2 * data.steps
    for a, b in zip(plain, cached):
        assert all(np.array_equal(a[k], b[k]) for k in ("images", "labels", "valid"))
    assert not np.array_equal(plain[0]["labels"], plain[data.steps]["labels"])  # epoch 1 is another shuffle


def test_a_folders_table_holds_each_file_decoded_and_its_reader_keeps_the_order(tmp_path):
    """The folders pipeline crops whole decoded images when it keeps them (its uncached path decodes the crop
    alone), so its pixels differ from the uncached run's; what must not: the table holds every file of the
    shard exactly as DALI decodes it, and the labels and padding masks come call by call as without it."""
    from nvidia.dali import fn, pipeline_def, types

    from dali_launch.launcher.data.synth import SynthSpec, synth

    synth(SynthSpec(tmp_path, "folders", classes=4, train=150, test=4, image_scale=0.1, workers=1))
    folders = {"pipeline": "folders", "image_size": 16}
    plain, _ = _epochs(tmp_path / "training", "off", 2, **folders)
    cached, data = _epochs(tmp_path / "training", "64", 2, **folders)
    for a, b in zip(plain, cached, strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in ("labels", "valid")) and np.isfinite(b["images"]).all()

    @pipeline_def(batch_size=50, num_threads=1, device_id=None, seed=0)
    def decoded():
        files, _ = fn.readers.file(file_root=str(tmp_path / "training"))
        return fn.get_property(files, key="source_info"), fn.decoders.image(files, output_type=types.RGB)

    pipe = decoded()
    pipe.build()
    files = {np.asarray(i).tobytes(): np.array(im) for _ in range(3) for i, im in zip(*pipe.run())}
    table = data.host_cache.table
    assert len(files) == 150 and table.keys() == files.keys()
    assert all(np.array_equal(table[key], image) for key, image in files.items())


def test_a_folders_shard_fills_with_the_files_its_shuffling_reader_reads(tmp_path):
    """readers.file shuffles its whole file list before sharding when it shuffles: the fill of device 1 of 2
    (a process of its own, as under --processes 2) holds exactly the files a training reader of that shard reads."""
    from nvidia.dali import fn, pipeline_def

    from dali_launch.launcher.data.synth import SynthSpec, synth
    from dali_launch.trainer.data import decoded_cache
    from dali_launch.trainer.data.pipelines import _folders

    synth(SynthSpec(tmp_path, "folders", classes=4, train=24, test=4, image_scale=0.1, workers=1))
    config = DataConfig(pipeline="folders", decoder="cpu", reader_threads=1, output_dtype="float32", image_size=16)
    base = dali.pipeline_args(dali.Split(str(tmp_path / "training"), True, 4), 0, 1, 4, decided(config))
    table = decoded_cache.fill(_folders, base, [1], 2, 1).table

    @pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=0)
    def reader():
        files, _ = fn.readers.file(
            file_root=str(tmp_path / "training"), **dataclasses.replace(base, shard_id=1, num_shards=2).reader_args()
        )
        return fn.get_property(files, key="source_info")

    pipe = reader()
    pipe.build()
    read = {np.asarray(info).tobytes() for _ in range(3) for info in pipe.run()[0]}  # 12 samples: 3 batches
    assert set(table) == read and len(read) == 12


@pytest.mark.parametrize("samples", [800, 801, 7, 60_000])
def test_a_devices_shard_is_its_readers_shards_end_to_end(samples):
    """What `fill` reads for device d (shard d of D) is exactly what its R readers read (shards d*R.. of D*R)."""
    devices, readers = 3, 4
    for d in range(devices):
        parts = [shards.shard_size(samples, d * readers + r, devices * readers) for r in range(readers)]
        assert sum(parts) == shards.shard_size(samples, d, devices)
        assert samples * d // devices == samples * (d * readers) // (devices * readers)  # the same first sample


def test_the_kind_is_written_with_the_checkpoint_and_read_back(tmp_path):
    paths = RunPaths(tmp_path)
    checkpointer = Checkpointer(paths, keep=2, decoded_cache="host")
    tally = {"position": jax.device_put(np.zeros((1,), np.int32))}
    checkpointer.save(4, {"w": np.zeros(2, np.float32)}, tally, [], {"epoch": 0, "calls_done": 4})
    checkpointer.wait()
    assert saved.newest(paths).decoded_cache == "host"
    from dali_launch.trainer.config import TaskSpec

    assert start_point.read(paths, TaskSpec(run_dir=str(tmp_path)), 0, 1, 1).decoded_cache == "host"
