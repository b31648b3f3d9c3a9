"""DALI's own pipeline functions trained as they are written (trainer/data/native.py): DALI's multi-GPU JAX tutorial
function (tests/dali_tutorial.py) through `dali-launch train`, `--local` processes and the Python API, its outputs
GPU ones (the stand-in, tests/gpu_standin: the tutorial's are on the GPU), every training sample seen once an
epoch; a pipeline_def one on CPU outputs, over two readers a device; one whose parameters only --pipeline-params
names.
What the adapter gives the reader, and the two places JAX could start before the run sets it up. The refusals are
test_catalogue_native.py's."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import CLI, REPO, check_ok, dali_launch, standin_counts
from nvidia.dali.pipeline import Pipeline
from run_readers import only_run, seen_prints

from dali_launch.trainer.data import native
from dali_launch.trainer.data import registry as pipelines
from dali_launch.trainer.data.contract import Pipeline as ContractPipeline
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.observe.replicas import fingerprints

TESTS = {"PYTHONPATH": str(REPO / "tests")}
RANKED = "split_dir=path,rank=shard_id,world=num_shards,train=training,depth=10"


def plain(data_path, shard_id, num_shards, is_training=False):  # a plain function DALI's way: no decorator
    raise AssertionError("never called here")


def contract(args):  # the contract's own
    raise AssertionError("never called here")


def contract_with_shards(args, shard_id=0, num_shards=1):  # still called as function(args)
    raise AssertionError("never called here")


@pytest.mark.parametrize("name", ["mnist_sharded_iterator", "mnist_pipeline", "mnist_ranked"])
def test_a_decorated_function_is_its_graph_function_adapted(name):
    """data_iterator's and pipeline_def's wrappers, by name and as the object a Python caller hands the loader: the
    graph function they wrap, data_iterator's output_map with it."""
    import dali_tutorial

    wrapper = getattr(dali_tutorial, name)
    for target in (f"dali_tutorial:{name}", wrapper):
        function = pipelines.load(target)
        assert isinstance(function, native.Native) and function.function is wrapper.__wrapped__
        assert function.output_map == (("images", "labels") if name == "mnist_sharded_iterator" else ())


def test_plain_functions_are_told_apart_by_their_parameters():
    """A plain function taking shard_id and num_shards is DALI's way; one callable as function(args) is ours."""
    assert pipelines.load(plain) == native.Native(plain, "test_native:plain")
    for ours in (contract, contract_with_shards, ContractPipeline(contract)):
        assert pipelines.load(ours) is ours


def test_pipeline_params_are_roles_or_literal_values():
    given = native.parsed(" split_dir=path, crop=(1, 2),name='seed',mode=fast ")
    assert given == {"split_dir": "path", "crop": "(1, 2)", "name": "'seed'", "mode": "fast"}
    assert [native.literal(given[k]) for k in ("crop", "name", "mode")] == [(1, 2), "seed", "fast"]
    assert native.parsed("") == {}


def _built(name: str, args: PipelineArgs):
    """--pipeline `name` adapted, defined for `args` and built on the CPU, as the trainer builds one."""
    function = pipelines.load(name)
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=None, seed=0)
    with pipe:
        pipe.set_outputs(*function(args))
    pipe.build()
    return pipe


@pytest.mark.parametrize(
    "name, params, width",
    [
        ("mnist_sharded_iterator", "", 10),  # the tutorial's own one_hot depth
        ("mnist_pipeline", "", 7),  # num_classes by the rule: the run's
        ("mnist_ranked", RANKED.replace("depth=10", "depth=5"), 5),  # a literal value
    ],
)
def test_the_reader_reads_the_devices_shard_padded(small_lmdb, name, params, width):
    """The rule and --pipeline-params fill the parameters: the reader reads this device's shard of the job's (1 of
    3), padded to whole batches though the function never said so, and the literal and the run's values arrive."""
    args = PipelineArgs(str(small_lmdb / "training"), 1, 3, 4, True, False, "cpu", 0, 7, 28, pipeline_params=params)
    pipe = _built(f"dali_tutorial:{name}", args)
    (meta,) = pipe.reader_meta().values()
    assert (meta["shard_id"], meta["number_of_shards"], meta["pad_last_batch"], meta["stick_to_shard"]) == (1, 3, 1, 1)
    images, labels = (np.array(output.as_tensor()) for output in pipe.run())
    assert images.shape == (4, 784) and labels.shape == (4, width)


def _reference_prints(data) -> collections.Counter:
    """Every training sample once (one shard, one batch) through the tutorial's function as DALI would run it."""
    import dali_tutorial

    pipe = Pipeline(batch_size=800, num_threads=1, device_id=None, seed=0)
    with pipe:
        pipe.set_outputs(*dali_tutorial.mnist_sharded_iterator.__wrapped__(str(data / "training"), True, 1, 0))
    pipe.build()
    images, labels = (np.array(output.as_tensor()) for output in pipe.run())
    return collections.Counter(fingerprints([images, labels]).tolist())


def _trained(tmp_path, small_lmdb, where: list[str], function: str, *flags: str, epochs: int = 1, env=TESTS):
    """A run of --pipeline dali_tutorial:`function` on 800 training digits, batches of 64 (an epoch ends padded);
    each epoch's recorded samples checked against the split's, each once."""
    proc = dali_launch(
        *where, "--pipeline", f"dali_tutorial:{function}", *flags, "--data-dir", str(small_lmdb),
        "--batch-size", "64", "--epochs", str(epochs), "--record-samples", "--init-timeout-s", "60",
        "--run-root", str(tmp_path / "runs"), env=env,
    )  # fmt: skip
    check_ok(proc)
    paths, expected = only_run(tmp_path / "runs"), _reference_prints(small_lmdb)
    for epoch in range(epochs):
        seen = seen_prints(paths, epoch)
        assert seen == expected, f"epoch {epoch}: {sum(seen.values())} prints, {len(seen - expected)} not the split's"
    return proc


def _on_the_gpu(env: dict) -> None:
    """The run's outputs were GPU ones (the stand-in's), each taken to JAX by DLPack but the pre-flight's one
    sample of each of the two outputs, copied to the host."""
    counts = standin_counts(env)
    assert counts["outputs"] > 2 and counts["as_cpu"] == 2, counts
    assert counts["dlpack"] == counts["outputs"] - counts["as_cpu"], counts


@pytest.mark.slow
def test_the_tutorial_function_trains_unchanged(tmp_path, small_lmdb, gpu_runs):
    """`dali-launch train --pipeline dali_tutorial:mnist_sharded_iterator`, its outputs on the "GPU": each sample
    once, padding masked."""
    proc = _trained(tmp_path, small_lmdb, ["train"], "mnist_sharded_iterator", env=gpu_runs)
    assert "done: test accuracy" in proc.stdout
    _on_the_gpu(gpu_runs)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_tutorial_function_trains_over_processes(tmp_path, small_lmdb, gpu_runs):
    """2 jax.distributed processes: each imports the module (its sharding over jax.devices()) after initialize, and
    reads its global shard of 2 on its "GPU"; every sample once in each of 2 epochs, the replicas identical."""
    proc = _trained(
        tmp_path,
        small_lmdb,
        ["--local", "--gpus-per-node", "2", "--processes", "2"],
        "mnist_sharded_iterator",
        epochs=2,
        env=gpu_runs,
    )
    assert "2 replicas identical" in proc.stdout, proc.stdout
    _on_the_gpu(gpu_runs)


@pytest.mark.slow
@pytest.mark.parametrize(
    "function, flags",
    [
        ("mnist_pipeline", ["--readers-per-device", "2"]),  # shards 0 and 1 of 2 on one device
        ("mnist_ranked", ["--pipeline-params", RANKED]),
    ],
    ids=["pipeline-def-two-readers", "pipeline-params"],
)
def test_pipeline_def_functions_train(tmp_path, small_lmdb, function, flags):
    _trained(tmp_path, small_lmdb, ["train"], function, *flags)


def test_the_cli_names_the_tutorials_functions_in_a_module():
    """A module without :function names DALI's functions in it too, as callables the trainer can call."""
    proc = subprocess.run(
        [*CLI, "train", "--pipeline", "dali_tutorial"],
        capture_output=True, text=True, env={**os.environ, **TESTS}, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "(its callables that take function(args): mnist_sharded_iterator, mnist_pipeline, mnist_ranked)" in (
        proc.stderr
    ), proc.stderr


def _python(code: str, platforms: str | None = "cpu") -> subprocess.CompletedProcess:
    """`code` in a fresh Python, the tests' modules importable, JAX_PLATFORMS `platforms` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"} | TESTS
    env |= {"JAX_PLATFORMS": platforms} if platforms else {}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_decoder_auto_on_gpus_refuses_a_module_that_starts_jax():
    """--decoder auto asks the module for its word before JAX starts; the tutorial's module starts JAX as it is
    imported: one line, naming --decoder mixed (run here as on a GPU task, in a fresh process)."""
    proc = _python(
        "from dali_launch.trainer.config import DataConfig, TaskSpec\n"
        "from dali_launch.trainer.entries import Entries\n"
        "from dali_launch.trainer.errors import UsageError\n"
        "from dali_launch.trainer.plan import placement\n"
        "config = DataConfig(pipeline='dali_tutorial:mnist_sharded_iterator')\n"
        "decoder = lambda: placement.decoder(config, 'gpu', Entries(TaskSpec(run_dir='x', data=config)))\n"
        "try:\n"
        "    decoder()\n"
        "except UsageError as e:\n"
        "    print(e)\n"
        "print(decoder())\n"
    )
    check_ok(proc)
    said, again = proc.stdout.strip().splitlines()
    assert said.startswith("--pipeline dali_tutorial:mnist_sharded_iterator starts JAX when imported"), said
    assert "pass --decoder mixed (or cpu)" in said
    assert again == "mixed"  # imported already: nothing more starts


def test_initialize_refuses_a_jax_already_started(tmp_path):
    """A module that asked JAX for its devices before jax.distributed.initialize (`dali-launch task` checks the
    user's modules in the process that trains): one line, not JAX's traceback."""
    proc = _python(
        "import jax, dali_tutorial\n"
        "from dali_launch.trainer import topology\n"
        "from dali_launch.trainer.config import DistributedConfig\n"
        "from dali_launch.trainer.errors import UsageError\n"
        "t = topology.Topology(1, 2, '127.0.0.1:1', None, None, 'here', 'cpu')\n"
        "try:\n"
        "    topology.initialize(t, DistributedConfig())\n"
        "except UsageError as e:\n"
        "    print(e)\n"
    )
    check_ok(proc)
    assert proc.stdout.startswith("process 1: JAX started before jax.distributed.initialize"), proc.stdout


@pytest.mark.parametrize("mode, platforms", [(["--local"], "cpu"), (["train"], "None")])
def test_the_launchers_checks_keep_jax_to_the_cpu_where_tasks_run_apart(small_lmdb, mode, platforms):
    """The launcher imports the tutorial's module to check it, and the module asks JAX for its devices: under --local
    (or SLURM) that JAX is the launcher's own, kept to the CPU so the GPUs stay the tasks' (whose environment is
    given back as it was); under `train` it is the task's, left as it is."""
    argv = [*mode, "--dry-run", "--pipeline", "dali_tutorial:mnist_sharded_iterator", "--data-dir", str(small_lmdb)]
    proc = _python(
        "import os\n"
        "from dali_launch.launcher.cli import main\n"
        f"code = main({argv!r})\n"
        "import jax\n"
        "print(code, jax.config.jax_platforms, os.environ.get('JAX_PLATFORMS'))\n",
        platforms=None,
    )
    check_ok(proc)
    assert proc.stdout.splitlines()[-1] == f"0 {platforms} None", proc.stdout[-2000:]


def test_the_python_apis_checks_keep_jax_to_the_cpu_even_for_a_run_here(small_lmdb):
    """Executor("here") trains in a follower process, not the script's: a function named by reference, imported by
    the checks, starts the script's JAX on the CPU, so the GPUs stay the run's (a dry run stops after the checks)."""
    proc = _python(
        "import jax\n"
        "from dali_launch.launcher.api import Executor\n"
        "from dali_launch.launcher.route import launch\n"
        "from dali_launch.trainer.config import replaced\n"
        "from dali_launch.trainer.errors import UsageError\n"
        "run = Executor('here').run_config(\n"
        f"    pipeline='dali_tutorial:mnist_sharded_iterator', data_dir={str(small_lmdb)!r}\n"
        ")\n"
        "try:\n"
        "    launch.submit(replaced(run, dry_run=True), 'train')\n"
        "except UsageError as e:\n"
        "    print(e)\n"
        "print(jax.config.jax_platforms)\n",
        platforms=None,
    )
    check_ok(proc)
    assert proc.stdout.splitlines()[-2:] == [
        "dry_run prints what would run and starts nothing; leave it out to submit the run",
        "cpu",
    ], proc.stdout[-2000:]


SCRIPT = """
import json, sys
from dali_tutorial import mnist_sharded_iterator  # as a notebook imports it: its sharding built on import
from dali_launch.launcher.api import Executor

local = Executor("local", gpus_per_node=2, processes=2, init_timeout_s=60, batch_size=64, record_samples=True)
job = local.submit(pipeline=mnist_sharded_iterator, data_dir=sys.argv[1], run_root=sys.argv[2], epochs=1)
print(json.dumps({"run_dir": str(job.run_dir), "final": job.result(timeout_s=600)["final"]}))
"""


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_tutorial_function_trains_through_the_python_api(tmp_path, small_lmdb, gpu_runs):
    """A script hands the tutorial's function itself to Executor("local"): recorded by reference
    (dali_tutorial:mnist_sharded_iterator), two processes read their global shards on their "GPUs", every
    sample once."""
    runs = tmp_path / "runs"
    argv = [sys.executable, "-c", SCRIPT, str(small_lmdb), str(runs)]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, env={**os.environ, **gpu_runs}, cwd=tmp_path
    )
    check_ok(proc)
    _on_the_gpu(gpu_runs)
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    paths = only_run(runs)
    assert said["run_dir"] == str(paths.root) and said["final"]["test_accuracy"] > 0.3, said
    assert json.loads(paths.config.read_text())["data"]["pipeline"] == "dali_tutorial:mnist_sharded_iterator"
    assert seen_prints(paths, 0) == _reference_prints(small_lmdb)
