"""Where DALI runs (--decoder), what follows from it (CPU codecs only, --cuda-graphs), and readers per device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plans import planned

from dali_launch.trainer.config import DataConfig, TaskSpec, replaced
from dali_launch.trainer.data import codecs, contract
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.entries import Entries
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan import placement


@pytest.mark.parametrize(
    "pipeline, decoder, platform, expected",
    [
        ("mnist", "auto", "gpu", "cpu"),  # mnist's own auto_decoder: 28x28 JPEGs
        ("folders", "auto", "gpu", "mixed"),
        ("folders", "auto", "cpu", "cpu"),
        ("test_placement:plain_pipeline", "auto", "gpu", "mixed"),  # no auto_decoder: nvJPEG on GPUs
        ("mnist", "mixed", "gpu", "mixed"),
        ("folders", "cpu", "gpu", "cpu"),
    ],
)
def test_decoder_resolution(pipeline, decoder, platform, expected):
    config = DataConfig(pipeline=pipeline, decoder=decoder)
    assert placement.decoder(config, platform, Entries(TaskSpec(run_dir="x", data=config))) == expected
    assert placement.place(TaskSpec(run_dir="x", data=config), platform).decoder == expected


def test_nvjpeg_on_cpu_devices_is_refused_before_anything_starts():
    with pytest.raises(UsageError, match=r"^--decoder mixed decodes on the GPU, but this run has CPU devices; use "):
        placement.place(TaskSpec(run_dir="x", data=DataConfig(decoder="mixed")), "cpu")


def test_a_pipelines_arguments_default_to_the_flags_defaults():
    """One default per knob: a PipelineArgs made without a value (a benchmark's, a test's) holds what the flag
    left unset gives a run; the two had parted (--hw-decoder-load 0.35 against 0.65)."""
    flags, args = DataConfig(), PipelineArgs("unused", 0, 1, 1, True, True, "mixed", 0, 10, 32)
    for knob in ("hw_decoder_load", "bad_samples", "max_bad_samples", "augment"):
        assert getattr(args, knob) == getattr(flags, knob), knob
    assert args.decoder_args()["hw_decoder_load"] == flags.hw_decoder_load == contract.HW_DECODER_LOAD
    assert args.randaugment == flags.randaugment_nm() == contract.RANDAUGMENT


def plain_pipeline(args):  # a user's pipeline function that says nothing about its decoder
    raise AssertionError("never built here")


@pytest.mark.parametrize(
    "setting, dali_gpu, expected",
    [("auto", False, True), ("auto", True, False), ("on", True, True), ("off", False, False)],
)
def test_cuda_graphs_resolution(setting, dali_gpu, expected):
    assert placement.cuda_graphs(setting, dali_gpu) is expected


DECODE = """
import json, sys
import numpy as np
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.data.dali import graph
from dali_launch.trainer.data import codecs
from dali_launch.trainer.data.pipelines import mnist
if sys.argv[2] == "cpu-codecs":
    codecs.use_cpu_codecs_only()
args = PipelineArgs(path=sys.argv[1], shard_id=0, num_shards=1, batch_size=500, training=False, on_gpu=False,
                    decoder="cpu", seed=0, num_classes=10, image_size=28)
pipe = graph(mnist, args, "mnist", batch_size=500, num_threads=2, device_id=None)
pipe.build()
images, labels = pipe.run()
import os
print(json.dumps({"sum": float(np.array(images.as_tensor()).sum()), "labels": np.array(labels.as_tensor()).tolist(),
                  "codecs": os.environ.get("NVIMGCODEC_EXTENSIONS_PATH")}))
"""


def _decode(path: Path, codecs: str, env: dict | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", DECODE, str(path), codecs],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cpu_codecs_decode_the_same_pixels(mnist_lmdb, tmp_path):
    """nvImageCodec limited to its CPU codecs decodes exactly what the full set decodes; the folder of
    links is made once in the cache and shared, never in the temporary folder."""
    env = {"DALI_LAUNCH_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    full = _decode(mnist_lmdb / "testing", "all", env)
    cpu, again = (_decode(mnist_lmdb / "testing", "cpu-codecs", env) for _ in range(2))
    assert full["codecs"] is None and cpu["codecs"] == again["codecs"]
    assert Path(cpu["codecs"]).is_relative_to(tmp_path / "cache") and Path(cpu["codecs"]).is_dir()
    assert (full["sum"], full["labels"]) == (cpu["sum"], cpu["labels"])
    assert not any((tmp_path / "tmp").iterdir())


def test_a_killed_process_leaves_no_codecs_folder(tmp_path):
    """kill -9 right after the codecs are set up: nothing is left in the temporary folder."""
    env = {**os.environ, "DALI_LAUNCH_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    code = (
        "from dali_launch.trainer.data import codecs; codecs.use_cpu_codecs_only(); print('ready', flush=True); "
        "import time; time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert not any((tmp_path / "tmp").iterdir())
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["nvimgcodec-cpu"]


def test_cpu_codecs_folder_holds_no_gpu_codec(monkeypatch, tmp_path):
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path))
    source = codecs._codecs_folder()
    assert source is not None, "the nvidia-nvimgcodec wheel DALI depends on has a codec folder"
    monkeypatch.setenv(codecs.CODECS_PATH, "")  # recorded, so the test's own value is undone after it
    monkeypatch.delenv(codecs.CODECS_PATH)
    codecs.use_cpu_codecs_only()
    folder = Path(os.environ[codecs.CODECS_PATH])
    linked = {p.name for p in folder.iterdir()}
    assert linked and not {name.split(".so")[0] for name in linked} & codecs.GPU_CODECS
    assert linked == {p.name for p in source.iterdir() if p.name.split(".so")[0] not in codecs.GPU_CODECS}


def test_a_codecs_path_already_set_is_kept(monkeypatch, tmp_path):
    monkeypatch.setenv(codecs.CODECS_PATH, str(tmp_path))
    codecs.use_cpu_codecs_only()
    assert os.environ[codecs.CODECS_PATH] == str(tmp_path)


@pytest.mark.parametrize(
    "decoder, graphs, codecs_only, graphs_off",
    [
        ("auto", "auto", True, False),  # mnist on a GPU node: DALI on the CPU, CUDA graphs on
        ("mixed", "auto", False, True),  # nvJPEG: DALI works on the GPU, graphs off
        ("mixed", "on", False, False),
        ("cpu", "off", True, True),
    ],
)
def test_process_env_for_a_gpu_task(monkeypatch, decoder, graphs, codecs_only, graphs_off):
    """What a GPU task sets before JAX and DALI start: nvImageCodec's codecs and XLA's CUDA graphs."""
    from dali_launch.trainer.topology import Topology, configure_process_env

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.setenv(codecs.CODECS_PATH, "")
    monkeypatch.delenv(codecs.CODECS_PATH)
    spec = replaced(TaskSpec(run_dir="x", data=DataConfig(decoder=decoder)), cuda_graphs=graphs)
    configure_process_env(Topology(0, 1, None, 1, (0,), "host", "gpu"), placement.place(spec, "gpu"))
    assert (codecs.CODECS_PATH in os.environ) is codecs_only
    flags = os.environ["XLA_FLAGS"].split()
    assert "--xla_dump_to=/tmp/x" in flags and ("--xla_gpu_enable_command_buffer=" in flags) is graphs_off


@pytest.mark.parametrize(
    "platform, cache, flags",
    [
        ("gpu", "", ["--xla_gpu_deterministic_ops=true"]),
        ("gpu", "off", ["--xla_gpu_deterministic_ops=true"]),
        ("cpu", "", []),
    ],
)
def test_deterministic_sets_xla_s_deterministic_kernels_before_jax_starts(
    monkeypatch, tmp_path, platform, cache, flags
):
    """--deterministic: XLA's deterministic GPU kernels in the process environment, resolved once and recorded
    (the plan's record: rank_map.json); CPUs need none (trainer/determinism.py). Every GPU run, with it or not, keeps
    XLA's autotuning picks in its run root's compile cache, unless that cache is off."""
    from dali_launch.trainer import compile_cache
    from dali_launch.trainer.topology import Topology, configure_process_env

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.setenv("JAX_PLATFORMS", "")
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    run_dir = str(tmp_path / "runs" / "r")
    spec = replaced(TaskSpec(run_dir=run_dir), deterministic=True, compile_cache=cache)
    where = placement.place(spec, platform)
    configure_process_env(Topology(0, 1, None, None, None, "host", platform), where)
    given = [f for f in os.environ["XLA_FLAGS"].split() if "deterministic" in f.split("=")[0]]
    recorded = {k: v for k, v in planned(spec, platform).step.xla_flags.items() if "deterministic" in k}
    assert given == flags and recorded == dict(f[2:].split("=") for f in flags)
    picks = f"--{compile_cache.AUTOTUNE_FLAG}={tmp_path / 'runs' / '.compile-cache' / 'autotune'}"
    kept = platform == "gpu" and cache != "off"
    assert (picks in os.environ["XLA_FLAGS"].split()) is kept
    no_flag = placement.place(replaced(TaskSpec(run_dir=run_dir), compile_cache=cache), platform).xla_flags
    assert no_flag == (((compile_cache.AUTOTUNE_FLAG, picks.split("=", 1)[1]),) if kept else ())


@pytest.mark.parametrize("op", ["decoders__Image", "decoders__ImageRandomCrop"])
def test_gpu_decoding_settings_are_arguments_dali_takes(op):
    """On a GPU, the built-in image pipelines give nvJPEG the hardware decoder's share and buffer sizes.
    No GPU exists here, so the arguments are checked against DALI's own schema of the decoders: a
    misspelt one would otherwise fail only on a GPU machine."""
    from nvidia.dali import backend, types

    from dali_launch.trainer.data.dali import Split, pipeline_args

    spec = TaskSpec(run_dir="x", data=DataConfig(pipeline="folders", hw_decoder_load=0.35, output_dtype="float16"))
    config = resolved_data(spec, "gpu")  # folders on a GPU: nvJPEG
    args = pipeline_args(Split("x", True, 8), 0, 1, 8, config)
    assert args.dtype() == types.FLOAT16
    kwargs = args.decoder_args()
    assert kwargs.pop("device") == "mixed" and kwargs["hw_decoder_load"] == 0.35
    schema = backend.GetSchema(op)
    assert kwargs and all(schema.HasArgument(name) for name in kwargs), kwargs
    cpu = pipeline_args(
        Split("x", True, 8), 0, 1, 8, resolved_data(TaskSpec(run_dir="x", data=DataConfig(pipeline="folders")), "cpu")
    )
    assert cpu.decoder_args() == {"device": "cpu"}  # CPU decoders take none of nvJPEG's settings


def resolved_data(spec: TaskSpec, platform: str):
    """What pipelines are built from: `spec`'s [data] settings, their auto values decided for one device."""
    return planned(spec, platform).data
