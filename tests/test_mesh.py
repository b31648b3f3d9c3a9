"""--mesh (trainer/plan/mesh.py): the train state sharded over an fsdp axis trains the SGD steps of data
parallelism, holds 1/M of the state on each device, and its checkpoints resume on another mesh."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO, check_ok, dali_launch
from run_readers import assert_same_params, only_run

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan import fit, mesh


def test_a_mesh_parses_and_resolves_against_the_device_count():
    assert mesh.parse("auto") is None
    assert mesh.for_job("auto", 8) == mesh.Mesh(data=8)
    assert mesh.for_job("data:2,fsdp:4", 8) == mesh.Mesh(data=2, fsdp=4)
    assert str(mesh.for_job("fsdp:4", 4)) == "fsdp:4" and mesh.for_job("fsdp:4", 4).shards_state
    assert mesh.for_job("fsdp:4", 8) == mesh.Mesh(data=2, fsdp=4)  # data takes what the others leave
    assert not mesh.for_job("data:4", 4).shards_state
    assert mesh.for_job("fsdp:2,tensor:2", 8) == mesh.Mesh(data=2, fsdp=2, tensor=2)
    assert mesh.for_job("tensor:2", 2).shards_state
    for bad, said in (
        ("fsdp:3", "spans 3 devices but the job has 8"),
        ("data:1,fsdp:4", "spans 4 devices but the job has 8"),
        ("fsdp:0", "COUNT a positive integer"),
        ("fsdp:2,fsdp:4", "once each"),
        ("model:8", "AXIS one of data, fsdp, tensor"),
        ("data:4,tensor:4", "spans 16 devices but the job has 8"),
    ):
        with pytest.raises(ValueError, match=said):
            mesh.for_job(bad, 8)


def test_a_step_too_large_for_a_device_names_the_fsdp_count_that_would_hold_it():
    """XLA's count under the mesh (arguments: the state and batch; the rest) against the pool: the fewest fsdp devices
    of the job whose share of the state and the rest fit, else that many devices, else none (the rest alone)."""
    from dali_launch.trainer.step.compiled import sharded

    mib = 1 << 20
    assert sharded(30 * mib, 20 * mib, 40 * mib, mesh.Mesh(data=4)) == (
        "shard the state with --mesh data:2,fsdp:2 (about 35.0 MiB a device)"
    )
    assert sharded(30 * mib, 20 * mib, 40 * mib, mesh.Mesh(data=2, fsdp=2)) == (
        "shard the state with --mesh fsdp:4 (about 35.0 MiB a device)"
    )
    assert sharded(30 * mib, 20 * mib, 28 * mib, mesh.Mesh(data=6)) == (
        "shard the state with --mesh fsdp:6 (about 25.0 MiB a device)"  # 4 does not divide 6
    )
    assert sharded(30 * mib, 20 * mib, 40 * mib, mesh.Mesh()) == (
        "shard the state with --mesh fsdp:2 over 2 devices (more --nodes or --gpus-per-node)"
    )
    assert sharded(30 * mib, 62 * mib, 60 * mib, mesh.Mesh(data=8)) == ""  # activations alone exceed the pool


def test_a_dry_run_shows_how_the_mesh_lies_on_the_nodes():
    """Each tensor and fsdp group of job devices with the nodes it spans (step/shardings.device_grid's order)."""
    from dali_launch.launcher.route.rank_map import mesh_lines
    from dali_launch.launcher.run_config import LaunchConfig, RunConfig
    from dali_launch.trainer.config import replaced

    def lines(setting: str, nodes: int = 2, gpus: int = 4) -> list[str]:
        run = RunConfig(launch=LaunchConfig(nodes=str(nodes), gpus_per_node=gpus))
        return mesh_lines(replaced(run, mesh=setting))

    assert lines("data:2,fsdp:4") == [
        "--mesh data:2,fsdp:4: the state split over each group below, one copy per data group (2 data groups)",
        "  fsdp group: job devices [0, 1, 2, 3] on node 0",
        "  fsdp group: job devices [4, 5, 6, 7] on node 1",
    ]
    assert lines("fsdp:8")[1:] == [
        "  fsdp group: job devices [0, 1, 2, 3, 4, 5, 6, 7] on nodes 0, 1 (over the network)"
    ]
    assert lines("fsdp:2,tensor:2")[1:] == [
        "  tensor group: job devices [0, 1] on node 0",
        "  tensor group: job devices [2, 3] on node 0",
        "  tensor group: job devices [4, 5] on node 1",
        "  tensor group: job devices [6, 7] on node 1",
        "  fsdp group: job devices [0, 2] on node 0",
        "  fsdp group: job devices [1, 3] on node 0",
        "  fsdp group: job devices [4, 6] on node 1",
        "  fsdp group: job devices [5, 7] on node 1",
    ]
    assert lines("fsdp:4", nodes=16, gpus=2)[-2:] == [  # 8 groups of 4: the first 4 shown
        "  fsdp group: job devices [12, 13, 14, 15] on nodes 6, 7 (over the network)",
        "  ... 4 more fsdp groups",
    ]
    assert lines("data:8") == ["--mesh data:8: the state whole on every device"]
    assert lines("auto")[0].startswith("--mesh auto: data parallel over the 8 devices")


def test_fsdp_splits_the_largest_dividing_dimension_of_large_arrays_only():
    assert mesh.fsdp_dimension((784, 1024), 4) == 1
    assert mesh.fsdp_dimension((4096, 10), 4) == 0  # 10 does not divide by 4
    assert mesh.fsdp_dimension((1023, 17), 4) is None  # neither does: whole on every device
    assert mesh.fsdp_dimension((1024,), 4) is None  # a bias: too small to be worth a gather
    assert mesh.fsdp_dimension((784, 1024), 1) is None


def test_the_tensor_axis_splits_a_vits_attention_by_heads_and_its_mlp_by_units():
    """vit-s16's parameters as the trainer holds them (the blocks stacked over depth, axis 0): every block
    projection and MLP kernel is split over tensor:2 along its heads or hidden units, the rest is not."""
    import jax

    from dali_launch.trainer.model.registry import create_model

    shapes = jax.eval_shape(
        lambda: create_model("vit-s16", 10).init(jax.random.key(0), jax.numpy.zeros((1, 32, 32, 3)))
    )
    split = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
        name = jax.tree_util.keystr(path, simple=True, separator="/").removeprefix("params/Transformer/encoderblock/")
        split[name] = (leaf.shape, mesh.tensor_dimension(name, leaf.shape, 2))
    heads = "MultiHeadDotProductAttention_0"
    assert split[f"{heads}/query/kernel"] == ((12, 384, 6, 64), 2) and split[f"{heads}/value/bias"] == ((12, 6, 64), 1)
    assert split[f"{heads}/out/kernel"] == ((12, 6, 64, 384), 1) and split[f"{heads}/out/bias"][1] is None
    assert split["MlpBlock_0/Dense_0/kernel"] == ((12, 384, 1536), 2) and split["MlpBlock_0/Dense_0/bias"][1] == 1
    assert split["MlpBlock_0/Dense_1/kernel"] == ((12, 1536, 384), 1) and split["MlpBlock_0/Dense_1/bias"][1] is None
    assert (
        sum(d is not None for _, d in split.values()) == 10
    )  # q, k, v (kernel, bias), out, the MLP: 2 kernels, 1 bias
    assert mesh.tensor_dimension(f"{heads}/query/kernel", (12, 384, 6, 64), 4) is None  # 4 does not divide 6 heads
    assert mesh.fsdp_dimension((12, 384, 1536), 2, taken=2) == 1  # fsdp takes another dimension


def test_train_without_gpus_per_node_is_planned_for_the_gpus_it_would_see(monkeypatch):
    """`train` takes every GPU it sees: the count is planned once, without starting JAX, and every check reads
    it (--mesh was checked against one device: a 2-GPU machine refused --mesh fsdp:2); a job takes 1 per node;
    a count this machine does not show (a resume's recorded one) is refused before anything is written."""
    from dali_launch.launcher.route.checks import validate
    from dali_launch.launcher.route.machine_checks import check_gpu_count
    from dali_launch.launcher.run_config import DistributedConfig, RunConfig, replaced, with_devices
    from dali_launch.trainer.topology import visible_gpus

    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3"}) == 1
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    on_gpus = replaced(RunConfig(distributed=DistributedConfig(platform="gpu")), mesh="fsdp:2")
    planned = with_devices(on_gpus, here=True)
    assert planned.launch.gpus_per_node == 2 and planned.num_devices == 2
    validate(planned)  # --mesh fsdp:2 spans the machine's two GPUs
    with pytest.raises(UsageError, match="spans 2 devices but the job has 1"):
        validate(with_devices(on_gpus, here=False))  # a job: 1 GPU per node unless given
    assert with_devices(RunConfig(distributed=DistributedConfig(platform="cpu")), here=True).launch.gpus_per_node == 1
    check_gpu_count(planned)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(UsageError, match=r"--gpus-per-node 2, but this machine shows 1 GPU .* use --gpus-per-node 1"):
        check_gpu_count(planned)


@pytest.mark.parametrize(
    "flags, said",
    [
        (
            ["--mesh", "tensor:2"],
            "--mesh tensor:2: the tensor axis splits attention heads and MLP blocks, which --model mlp",
        ),
        (["--mesh", "fsdp:3"], "--mesh fsdp:3 spans 3 devices but the job has 2"),
        (
            ["--nodes", "2", "--mesh", "tensor:4"],
            "--mesh tensor:4: a tensor group of 4 devices does not fit in a node of 2",
        ),
        (["--mesh", "fsdp:2", "--parallel", "pmap"], "--mesh fsdp:2 shards the train state, which --parallel pmap"),
        (["--offload", "optimizer", "--parallel", "pmap"], "inside one jit program over the devices, which --parallel"),
    ],
)
def test_a_mesh_that_cannot_run_is_refused_in_one_line_before_anything_is_written(tmp_path, flags, said):
    proc = dali_launch("train", "--gpus-per-node", "2", *flags, "--run-root", str(tmp_path / "runs"))
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()


ADAMW = ["--optimizer", "adamw", "--learning-rate", "1e-3", "--batch-size", "25", "--init-timeout-s", "120"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_fsdp_trains_the_data_parallel_steps_on_a_quarter_of_the_memory_and_resumes_on_another_mesh(
    small_lmdb, tmp_path
):
    """8 CPU devices in 2 jax.distributed processes: the example's MLP with AdamW (two moments a parameter),
    its state sharded over fsdp:4, against the same run data parallel; then the sharded run resumed for a
    second epoch on 4 devices as data:2,fsdp:2 and a third on one device; and --init-from it onto fsdp:2. (The MLP, not a ViT: the same sharding rule, a tenth of the compile.)"""
    common = ["--local", "--processes", "2", "--gpus-per-node", "8", *ADAMW, "--data-dir", str(small_lmdb)]
    replicated, sharded = tmp_path / "dp", tmp_path / "fsdp"
    check_ok(dali_launch(*common, "--epochs", "1", "--run-root", str(replicated)))
    proc = dali_launch(*common, "--epochs", "1", "--mesh", "fsdp:4", "--run-root", str(sharded))
    check_ok(proc)
    assert "(sharded, mesh data:2,fsdp:4)" in proc.stdout, proc.stdout
    assert "after 1 epoch; 2 replicas identical;" in proc.stdout, proc.stdout  # 8 devices, 2 data replicas
    dp, fsdp = only_run(replicated), only_run(sharded)
    loss = lambda paths: [json.loads(line)["train_loss"] for line in paths.metrics.read_text().splitlines()]
    assert loss(fsdp) == pytest.approx(loss(dp), rel=1e-5)
    # The whole state, gathered, in the old format. fsdp sums each step's gradients in other groups (reduce-scatter
    # over fsdp, then data): 1 of the 1,048,576 Dense_2 kernel entries parted by 1.16e-5 here at daa279d, past
    # PARAMS_ATOL, the same in every run.
    assert_same_params(dp, fsdp, atol=1e-4)
    first_rank = lambda paths: json.loads(paths.rank_map.read_text())[0]
    assert [first_rank(p)["resolved"]["mesh"] for p in (dp, fsdp)] == ["data:8", "data:2,fsdp:4"]
    whole, quarter = (first_rank(p)["state_bytes_per_device"] for p in (dp, fsdp))
    # The kernels and their AdamW moments are split in four; biases, norms and the step count stay whole.
    assert whole / 4 < quarter < whole / 4 * 1.05, (whole, quarter)
    # Its checkpoint on another mesh of fewer devices (the global batch kept), then on one device
    fewer = ["--gpus-per-node", "4", "--processes", "2", "--mesh", "data:2,fsdp:2"]
    # evaluated by process 0 alone: the other process still takes part in gathering the parameters (it hung in
    # the gather until the barrier's timeout, 900 s by default)
    check_ok(dali_launch("--resume", str(fsdp.root), "--epochs", "2", *fewer, "--eval-on", "process-0"))
    assert first_rank(fsdp)["resolved"]["mesh"] == "data:2,fsdp:2"
    one = ["--gpus-per-node", "1", "--processes", "1", "--mesh", "auto"]
    check_ok(dali_launch("--resume", str(fsdp.root), "--epochs", "3", *one))
    assert first_rank(fsdp)["resolved"]["mesh"] == "data:1"
    epochs = [json.loads(line) for line in fsdp.metrics.read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [0, 1, 2] and {e["train_samples"] for e in epochs} == {800}, epochs
    assert [e["eval_devices"] for e in epochs] == [8, 2, 1] and epochs[1]["test_count"] == 200, epochs
    # evaluated as it lies over the 8 devices (not gathered), then gathered for process 0, then whole on one
    assert [e["eval_sharded"] for e in epochs] == [True, False, False], epochs
    first_epoch = json.loads(dp.metrics.read_text().splitlines()[0])
    assert not first_epoch["eval_sharded"] and first_epoch["test_accuracy"] == epochs[0]["test_accuracy"], epochs
    # --init-from it onto a sharded mesh of its own (its parameters; a fresh AdamW): every array loaded
    tuned = tmp_path / "tuned"
    check_ok(dali_launch("train", *ADAMW, "--data-dir", str(small_lmdb), "--gpus-per-node", "2", "--mesh", "fsdp:2",
                         "--init-from", str(fsdp.root), "--epochs", "1", "--run-root", str(tuned)))  # fmt: skip
    plan = json.loads(only_run(tuned).init_from.read_text())
    assert len(plan["loaded"]) == 8 and plan["reinitialised"] == [] == plan["ignored"], plan  # 4 kernels, 4 biases
    assert loss(only_run(tuned))[0] < loss(fsdp)[0] / 2, (loss(only_run(tuned)), loss(fsdp))  # a fresh start: 1.9


@pytest.mark.slow
def test_a_state_too_large_for_a_device_is_sharded_by_auto_and_refused_in_one_line_on_a_mesh_given(
    small_lmdb, tmp_path
):
    """The MLP with AdamW: 9.5 MiB of parameters, 28 MiB of state, 38 MiB with its gradients. On devices of a
    34 MiB pool (DALI_LAUNCH_DEVICE_MEMORY_MB: CPU devices say none, a GPU says its own), --mesh auto shards
    the state over the fewest devices that hold it; a data-parallel mesh given keeps AdamW's moments in host
    memory (--offload auto), and with them on the devices is refused before the state is placed, naming
    that fsdp count."""
    env = {fit.ENV: "34"}  # fsdp:2's compiled step, its parameters gathered, needs 28.5 MiB
    common = [*ADAMW, "--data-dir", str(small_lmdb), "--gpus-per-node", "4", "--epochs", "1"]
    given = [*common, "--mesh", "data:4"]
    proc = dali_launch("train", *given, "--offload", "device", "--run-root", str(tmp_path / "refused"), env=env)
    assert proc.returncode == 2, proc.stderr
    said = "the train state and its gradients need 37.8 MiB per device under --mesh data:4 (activations not counted)"
    assert said in proc.stderr and proc.stderr.strip().endswith("--mesh fsdp:2 would need about 18.9 MiB"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = dali_launch("train", *common, "--run-root", str(tmp_path / "auto"), env=env)
    check_ok(proc)
    assert "(sharded, mesh data:2,fsdp:2)" in proc.stdout, proc.stdout
    assert json.loads(only_run(tmp_path / "auto").rank_map.read_text())[0]["resolved"]["mesh"] == "data:2,fsdp:2"
    proc = dali_launch("train", *given, "--run-root", str(tmp_path / "offloaded"), env=env)
    check_ok(proc)
    assert "(sharded, optimizer state in host memory)" in proc.stdout, proc.stdout
    resolved = json.loads(only_run(tmp_path / "offloaded").rank_map.read_text())[0]["resolved"]
    assert (resolved["mesh"], resolved["offload"]) == ("data:4", "optimizer"), resolved


@pytest.mark.slow
def test_the_optimizer_state_in_host_memory_takes_the_same_steps_and_resumes(small_lmdb, tmp_path):
    """--offload optimizer: SGD's momentum in the host's pinned memory, brought to the devices for each call: on
    2 CPU devices the same losses and parameters as on the devices, a device holding the parameters alone;
    resumed from its checkpoint for a second epoch, where the momentum goes back to host memory."""
    common = ["train", "--data-dir", str(small_lmdb), "--gpus-per-node", "2"]
    check_ok(dali_launch(*common, "--epochs", "2", "--run-root", str(tmp_path / "device")))
    check_ok(dali_launch(*common, "--epochs", "1", "--offload", "optimizer", "--run-root", str(tmp_path / "host")))
    device, host = only_run(tmp_path / "device"), only_run(tmp_path / "host")
    proc = dali_launch("train", "--resume", str(host.root), "--epochs", "2")
    check_ok(proc)
    assert "(sharded, optimizer state in host memory)" in host.log(0).read_text()
    report = lambda paths: json.loads(paths.rank_map.read_text())[0]
    assert report(host)["resolved"]["offload"] == "optimizer" and report(device)["resolved"]["offload"] == "device"
    # the momentum is as large as the parameters: half the state left on a device (and the step count, the key)
    on_device = report(host)["state_bytes_per_device"] / report(device)["state_bytes_per_device"]
    assert 0.5 < on_device < 0.5001, on_device
    loss = lambda paths: [json.loads(line)["train_loss"] for line in paths.metrics.read_text().splitlines()]
    assert len(loss(host)) == 2 and loss(host) == pytest.approx(loss(device), rel=1e-6), (loss(device), loss(host))
    assert_same_params(device, host)


@pytest.fixture(scope="module")
def four_classes(tmp_path_factory):
    """96 small 4-class images as folders: a ViT's 12 steps (2 epochs at a global batch of 32) on CPU."""
    from dali_launch.launcher.data.synth import SynthSpec, synth

    root = tmp_path_factory.mktemp("four") / "set"
    synth(SynthSpec(root, "folders", classes=4, train=96, test=32, image_scale=0.1, workers=1))
    return root


TESTS_PATH = {"PYTHONPATH": str(REPO / "tests")}  # bn_models, as a user's package
VIT = ["--pipeline", "folders", "--image-size", "32", "--model", "bn_models:tiny_vit", "--num-classes", "4", *ADAMW[:4]]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_vit_on_fsdp_and_tensor_axes_takes_the_data_parallel_steps_on_a_quarter_of_the_memory(four_classes, tmp_path):
    """A small ViT (bn_models.tiny_vit: vit-s16's blocks, narrower: this test took 46 s, against 63 s with vit-s16)
    on 8 CPU devices in 2 processes, data parallel and as data:2,fsdp:2,tensor:2 (attention split by
    heads, the MLP by units, each tensor group gathering its rows): the same loss, each device holding a
    quarter of the state; each run's checkpoint then resumed on 2 devices, the sharded one as tensor:2 over 2
    processes, each reading its own shards of the checkpoint alone, AdamW's moments then kept in host memory."""
    common = ["--local", "--processes", "2", "--gpus-per-node", "8", *VIT, "--batch-size", "4"]
    common += ["--init-timeout-s", "120", "--data-dir", str(four_classes), "--epochs", "1"]
    check_ok(dali_launch(*common, "--run-root", str(tmp_path / "dp"), env=TESTS_PATH))
    proc = dali_launch(*common, "--mesh", "fsdp:2,tensor:2", "--run-root", str(tmp_path / "tp"), env=TESTS_PATH)
    check_ok(proc)
    assert "(sharded, mesh data:2,fsdp:2,tensor:2)" in proc.stdout, proc.stdout
    dp, tp = only_run(tmp_path / "dp"), only_run(tmp_path / "tp")
    first_rank = lambda paths: json.loads(paths.rank_map.read_text())[0]
    whole, quarter = (first_rank(p)["state_bytes_per_device"] for p in (dp, tp))
    # a quarter, and the small arrays whole (norms, biases: 0.8 %) and the patch embedding halved (fsdp alone)
    assert whole / 4 < quarter < whole / 4 * 1.07, (whole, quarter)
    # Written as it lies, each process its shards (Orbax's ocdbt.process_N), not gathered to process 0
    writers = lambda paths: {p.name for p in (paths.checkpoints / "3" / "state").iterdir() if "process_" in p.name}
    assert writers(tp) == {"ocdbt.process_0", "ocdbt.process_1"} and writers(dp) == {"ocdbt.process_0"}
    for run, layout, extra in ((dp, "auto", ["--processes", "1"]), (tp, "tensor:2", ["--processes", "2", "--offload",
                               "optimizer"])):  # fmt: skip
        resume = ["--resume", str(run.root), "--epochs", "2", "--gpus-per-node", "2", "--mesh", layout, *extra]
        check_ok(dali_launch(*resume, env=TESTS_PATH))
    assert first_rank(tp)["resolved"]["mesh"] == "tensor:2"
    assert "(sharded, mesh tensor:2, optimizer state in host memory)" in tp.log(0).read_text()
    assert "resumed from checkpoint 3: epoch 1, 0 device calls into it; read the whole state" in dp.log(0).read_text()
    # process 0 read the blocks' arrays half, the rest (embeddings, norms, the head) whole
    read = re.search(r"read its own shards, ([0-9.]+) of ([0-9.]+) MiB", tp.log(0).read_text())
    assert read and 0.5 < float(read[1]) / float(read[2]) < 0.6, tp.log(0).read_text()[-2000:]
    loss = lambda paths: [json.loads(line)["train_loss"] for line in paths.metrics.read_text().splitlines()]
    assert len(loss(tp)) == 2 and loss(tp) == pytest.approx(loss(dp), rel=1e-5), (loss(dp), loss(tp))
    assert_same_params(dp, tp, atol=1e-4)


def test_a_step_whose_activations_do_not_fit_is_refused_before_the_state_is_placed(tmp_path):
    """The MLP's state and gradients (28.5 MiB with momentum) fit a 60 MiB pool, but XLA's compiled step needs
    92.5 MiB at 2000 samples a step: refused in one line, from the compile-ahead's own count, with XLA's count
    at half the batch (53.2 MiB), which fits; at that batch it trains."""
    env = {fit.ENV: "60"}
    proc = dali_launch("train", "--batch-size", "2000", "--epochs", "1", "--run-root", str(tmp_path / "big"), env=env)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("dali-launch: error: the training step needs") and "of activations, gradients" in line, line
    assert "at 2000 samples per device and step) but a device has 60.0 MiB; --batch-size 1000 fits" in line, line
    check_ok(dali_launch("train", "--batch-size", "1000", "--epochs", "1", "--run-root", str(tmp_path / "ok"), env=env))


def test_a_vits_step_whose_activations_do_not_fit_recomputes_its_blocks_by_default_and_is_refused_without(
    tmp_path, synth_sets
):
    """vit-ti16 at 64×64, 105 samples a step: XLA's step needs 636–660 MiB, ~590 of them activations and other
    temporaries, against a 300 MiB pool. By default (--remat auto) the model is made again with its blocks
    recomputed (150.8 MiB), says so, records it and trains; with --remat none it is refused in one line whose
    first fix is --remat blocks."""
    env = {fit.ENV: "300"}
    vit = ["train", "--pipeline", "folders", "--data-dir", str(synth_sets["folders"]), "--num-classes", "4",
           "--image-size", "64", "--model", "vit-ti16", "--batch-size", "105", "--epochs", "1"]  # fmt: skip
    proc = dali_launch(*vit, "--run-root", str(tmp_path / "auto"), env=env)
    check_ok(proc)
    said = r"--remat auto: blocks; without, the step needs (\d+\.\d) MiB per device \(XLA's count: .*a device has 300\.0 MiB"
    needed = re.search(said, proc.stdout)
    assert needed and float(needed[1]) > 300, proc.stdout
    run = only_run(tmp_path / "auto")
    assert json.loads(run.config.read_text())["model"]["remat"] == "auto"
    assert json.loads(run.rank_map.read_text())[0]["resolved"]["remat"] == "blocks"
    proc = dali_launch(*vit, "--remat", "none", "--run-root", str(tmp_path / "refused"), env=env)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"dali-launch: error: the training step needs {needed[1]} MiB per device under"), line
    assert "but a device has 300.0 MiB; add --remat blocks (" in line, line
