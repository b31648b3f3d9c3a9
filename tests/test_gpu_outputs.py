"""DALI's GPU outputs through the data path, on CPU devices: the stand-in (tests/gpu_standin/gpu_outputs.py, the
`gpu_outputs` fixture) makes every pipeline's outputs GPU ones, and each branch they take gives what the same
pipelines' CPU outputs give, without a host copy where none is meant: device batches (training's, with their
masks, and evaluation's), the first batch's sample and the shapes checked against it, the fingerprints of
--record-samples, the label check's bounds, the pre-flight's sample, the host's decoded-sample table, a bad
sample's one line. Whole runs of GPU pipelines under the stand-in: test_native.py (gpu_runs)."""

from __future__ import annotations

import inspect
import types
from functools import partial

import jax
import numpy as np
import pytest
from catalogue import replace_image, synth_set
from gpu_standin import gpu_outputs as standin
from nvidia.dali import backend, fn
from nvidia.dali.pipeline import Pipeline
from plans import decided
from test_bad_samples import _corrupt_huffman_tables

from dali_launch.launcher.api import Executor
from dali_launch.launcher.run_config import task_spec
from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import dali, dali_outputs, decoded_cache, expected, graph_check, label_check, shards
from dali_launch.trainer.data import registry as pipelines
from dali_launch.trainer.data.batches import Readers, calls_per_epoch, device_batch
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model.registry import run_model
from dali_launch.trainer.observe.replicas import SampleRecorder
from dali_launch.trainer.plan import Plan, facts
from dali_launch.trainer.plan.eval import EvalPlan
from dali_launch.trainer.step.evaluate import Evaluator
from dali_launch.trainer.step.initial_state import Made
from dali_launch.trainer.tasks.classification import classification

CONFIG = decided(DataConfig(decoder="cpu", reader_threads=1, decoded_cache="off", output_dtype="float32"))
SHARDING, START = shards.Sharding(0, 1, 1, 2), dali.Start("shards", 0, 1, 60, 2)  # 2 readers of 60: padded calls


def _build(path, training: bool, config=CONFIG):
    """mnist's pipelines, 2 readers on one CPU device, as the trainer builds them (training's from START)."""
    devices = jax.local_devices(backend="cpu")[:1]
    split = dali.Split(str(path), training, 120)
    return dali.build(split, Readers(devices, devices, SHARDING), config, start=START if training else None)


def _read(data, run_dir) -> dict:
    """An epoch's batches, and what set-up and the loop read of them: one sample, its spec, the fingerprints
    --record-samples keeps (for a run in `run_dir`), the class ids' bounds the label check folds."""
    first, spec = data.first_sample("images"), data.sample_spec()
    recorder = SampleRecorder(types.SimpleNamespace(run_dir=str(run_dir)), data, 0, 0, 0)
    batches, seen = [], label_check.none()
    for _ in range(data.steps):
        batch = data.next()
        assert all(isinstance(x, jax.Array) for x in batch.values())
        batches.append({name: (np.asarray(x), x.dtype, x.sharding) for name, x in batch.items()})
        if "valid" in batch:
            recorder.add(0, batch)
        seen = label_check.fold(seen, batch["labels"].reshape(-1, *batch["labels"].shape[2:]))
    prints = np.concatenate(recorder.prints) if recorder.prints else None
    return {"first": (first.shape, first.dtype), "spec": spec, "batches": batches, "prints": prints, "seen": seen}


def _same(cpu: dict, gpu: dict) -> None:
    assert gpu["first"] == cpu["first"] and gpu["spec"] == cpu["spec"]
    assert len(gpu["batches"]) == len(cpu["batches"])
    for a, b in zip(cpu["batches"], gpu["batches"]):
        assert a.keys() == b.keys()
        for name in a:
            assert (a[name][1], a[name][2]) == (b[name][1], b[name][2]) and np.array_equal(a[name][0], b[name][0])
    assert np.array_equal(cpu["prints"], gpu["prints"]) if cpu["prints"] is not None else gpu["prints"] is None
    assert np.array_equal(cpu["seen"], gpu["seen"])


@pytest.fixture(scope="module")
def cpu_read(small_lmdb, tmp_path_factory) -> dict:
    """What the CPU outputs give: training's epoch and evaluation's, read before any stand-in is installed."""
    run_dir = tmp_path_factory.mktemp("cpu-run")
    return {split: _read(_build(small_lmdb / split, split == "training"), run_dir) for split in ("training", "testing")}


def _kinds(cls) -> dict:
    """A class's own attributes (no object's): each a method or a property."""
    names = set(dir(cls)) - set(dir(object)) - {"__dict__", "__weakref__", "__module__"}
    return {n: isinstance(inspect.getattr_static(cls, n), property) for n in names}


@pytest.mark.parametrize("cls", ["TensorGPU", "TensorListGPU"])
def test_the_stand_in_has_nothing_dalis_gpu_classes_lack(cls):
    """Each of the stand-in's attributes is DALI's own class's, a method where DALI's is one, a property where
    DALI's is; neither has __array__, so numpy makes an array of objects of either, as of DALI's on a GPU."""
    mine, dalis = _kinds(getattr(standin, cls)), _kinds(getattr(backend, cls))
    assert {n: dalis.get(n) for n in mine} == mine
    assert not {"__array__", "__array_interface__"} & (set(mine) | set(dalis))
    assert {"as_cpu", "shape", "dtype", "layout", "device_id"} <= set(mine)  # what the project may use
    tensor = standin.TensorGPU(backend.TensorCPU(np.ones((2, 3), np.float32), ""))
    assert np.asarray(tensor).dtype == object and np.array_equal(np.asarray(tensor.as_cpu()), np.ones((2, 3)))
    assert tensor.shape() == [2, 3] and tensor.dtype == backend.TensorCPU(np.ones(1, np.float32), "").dtype


@pytest.mark.parametrize("readers", [1, 2])
@pytest.mark.parametrize("lead", [True, False])
def test_device_batch_takes_gpu_outputs_by_dlpack(readers, lead, gpu_outputs):
    """One device's readers' outputs end to end (lead: with the axis a job-wide array is joined on; without: a
    remainder's slot): the CPU outputs' arrays, by DLPack, with no host copy; int64 arrives as int32, as the
    CPU branch gives it."""

    def outputs():
        pipe = Pipeline(batch_size=3, num_threads=1, device_id=None, seed=0)
        with pipe:
            pipe.set_outputs(fn.random.uniform(range=[0, 1], shape=[4]), fn.random.choice(9, shape=[2]))
        pipe.build()
        return pipe

    pipes = [outputs() for _ in range(readers)]
    runs = [Pipeline.run.original(pipe) for pipe in pipes]  # the CPU outputs of the same pipelines
    device = jax.local_devices(backend="cpu")[0]
    for i in range(2):
        cpu = device_batch([run[i] for run in runs], device, lead)
        gpu = device_batch([standin.TensorListGPU(run[i]) for run in runs], device, lead)
        assert (gpu.dtype, gpu.shape, gpu.devices()) == (cpu.dtype, cpu.shape, {device})
        assert np.array_equal(gpu, cpu) and gpu.dtype in (np.float32, np.int32)
    assert standin.counts == {"outputs": 2 * readers, "dlpack": 2 * readers}


def test_training_and_evaluation_batches_of_gpu_outputs_are_the_cpu_ones(small_lmdb, cpu_read, gpu_outputs, tmp_path):
    """Every call of an epoch (its masks: the last call is padded), evaluation's batches, the sample set-up
    initialises the model on and records, the fingerprints, the label bounds: what the CPU outputs give. The
    outputs reach the devices by DLPack, none copied to the host."""
    for split in ("training", "testing"):
        data = _build(small_lmdb / split, split == "training")
        _same(cpu_read[split], _read(data, tmp_path))
    assert standin.counts["dlpack"] == standin.counts["outputs"] > 0 and not standin.counts["as_cpu"]


@pytest.fixture(scope="module")
def evaluation(small_lmdb, tmp_path_factory) -> tuple:
    """The run's spec, variables shaped as its MLP's (drawn with numpy: initialising the model compiles for
    seconds), and what the trainer's own Evaluator makes of them on the CPU outputs: twice (the second from its
    cache on the devices)."""
    run = tmp_path_factory.mktemp("evaluation")
    spec = task_spec(Executor("here").run_config(data_dir=str(small_lmdb)), str(run), str(small_lmdb), "train")
    shapes = jax.eval_shape(run_model(spec).init, jax.random.PRNGKey(0), np.zeros((1, 784), np.float32))
    draw = np.random.default_rng(0).standard_normal
    variables = jax.tree.map(lambda x: (0.05 * draw(x.shape)).astype(x.dtype), shapes)
    return spec, variables, _evaluated(spec, variables)


def _evaluated(spec, variables) -> list:
    plan = Plan("cpu", CONFIG, None, EvalPlan(50, 2, True))  # what it takes of a plan
    evaluator = Evaluator(spec, facts.alone(jax.local_devices()[:1]), plan, Made.of(spec))
    said = [evaluator(variables)[:2] for _ in range(2)]
    assert evaluator.cached is not None and said[0][1] == 200
    return said


def test_evaluation_of_gpu_outputs_is_the_cpu_outputs(evaluation, gpu_outputs):
    """The trainer's Evaluator on GPU outputs, its batches kept on the devices after the first evaluation: the
    same sums, to the bit (the same program on the same inputs)."""
    spec, variables, on_cpu = evaluation
    assert _evaluated(spec, variables) == on_cpu
    assert standin.counts["dlpack"] == standin.counts["outputs"] > 0 and not standin.counts["as_cpu"]


def test_the_first_batch_of_gpu_outputs_is_the_one_expected(small_lmdb, gpu_outputs):
    """The batch guessed before the pipelines are built (the first call compiles on it) is the GPU outputs' batch."""
    calls = partial(calls_per_epoch, sharding=SHARDING, reader_batch=60, start=START)
    guess = expected.guess(CONFIG, str(small_lmdb / "training"), calls, classification())
    data = _build(small_lmdb / "training", True)
    assert guess == expected.Expected(data.sample_spec(), data.steps)
    abstract = lambda x: (x.shape, x.dtype, x.sharding)
    assert jax.tree.map(abstract, guess.batch(data.sharding_spec, 120)) == jax.tree.map(abstract, data.peek())


def _tutorial_args(small_lmdb) -> PipelineArgs:
    return PipelineArgs(str(small_lmdb / "training"), 0, 1, 4, True, False, "cpu", 0, 10, 28)


def test_the_preflight_samples_a_gpu_output_on_the_host(small_lmdb, gpu_outputs):
    """DALI runs a graph with GPU operators on the GPU it finds when the launcher samples it (device_id None):
    the sample it checks the task on is copied to the host, one DALI copy an output."""
    sample = graph_check.sample("dali_tutorial:mnist_sharded_iterator", _tutorial_args(small_lmdb), ("x", "y"))
    assert sample == {"x": ((784,), "float32"), "y": ((10,), "float32")}
    assert standin.counts == {"outputs": 2, "as_cpu": 2}


def test_the_host_table_fills_from_gpu_outputs(small_lmdb, gpu_outputs):
    """--decoded-cache's host table holds host copies of what its fill pipelines give, GPU outputs too: the CPU
    outputs' table, each sample once."""
    base = dali.pipeline_args(dali.Split(str(small_lmdb / "training"), True, 4), 0, 1, 4, CONFIG)
    from_gpu = decoded_cache.fill(pipelines.load("mnist"), base, [0], 1, 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dali_outputs, "GPU_TYPES", dali_outputs.GPU_TYPES[:2])
        patch.setattr(Pipeline, "run", Pipeline.run.original)
        from_cpu = decoded_cache.fill(pipelines.load("mnist"), base, [0], 1, 1)
    assert len(from_gpu.table) == 800 and from_gpu.table.keys() == from_cpu.table.keys()
    assert all(np.array_equal(from_gpu.table[k], from_cpu.table[k]) for k in from_cpu.table)
    assert standin.counts["as_cpu"] == standin.counts["outputs"] > 0


def test_a_sample_corrupt_inside_is_one_line_from_gpu_pipelines(tmp_path, monkeypatch, gpu_outputs):
    """DALI's failure on a sample the header check passed, from pipelines whose outputs are GPU ones: the line
    naming the file, as from CPU ones (test_bad_samples.py)."""
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))
    spoil = lambda root: replace_image(root / "training", "folders", 1, _corrupt_huffman_tables)
    data = synth_set("folders", spoil)(tmp_path)["data"]
    config = decided(
        DataConfig(pipeline="folders", decoder="cpu", reader_threads=1, image_size=16, output_dtype="float32")
    )
    built = _build(data / "training", True, config)
    with pytest.raises(UsageError, match=r"^DALI could not decode .*1/00000001\.jpg .* it is corrupt inside"):
        for _ in range(built.steps):
            built.next()
