"""The benchmark commands (epoch_time.py, components.py, scaling.py, multi_gpu.py, imagenet.py, nnx_step.py,
deterministic.py, step_levers.py, startup.py, against.py, sample_check.py, bad_samples_gpu.py), run end to end
with --smoke-cpu; scale.py (CPU by design) at N = 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, check_ok

from dali_launch.trainer import determinism

pytestmark = pytest.mark.slow

SCRIPT = REPO / "benchmarks" / "epoch_time.py"
SCALING = REPO / "benchmarks" / "scaling.py"
COMPONENTS = REPO / "benchmarks" / "components.py"
NNX_STEP = REPO / "benchmarks" / "nnx_step.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
OURS = ("ours-pmap-auto-k4-r1", "ours-sharded-auto-k4-r1")  # --decoders auto; --readers 0 resolves to 1 on CPU


def bench(*args: str, timeout: float, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        cwd=REPO,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def smoke(small_lmdb, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One smoke run (the example and ours in pmap and sharded mode, 2 epochs), shared by the tests; on
    small_lmdb (8 steps an epoch): the script's paths, not its figures, are under test."""
    out = tmp_path_factory.mktemp("bench")
    proc = bench(
        "--data",
        str(small_lmdb),
        "--smoke-cpu",
        "--epochs",
        "2",
        "--parallel",
        "pmap,sharded",
        "--steps-per-call",
        "4",
        "--work-dir",
        str(out / "runs"),
        "--out",
        str(out / "out.json"),
        "--plot",
        str(out / "out.png"),
        timeout=300,
    )
    return proc, out


def test_smoke_run_times_every_contender_and_plots(smoke):
    proc, out = smoke
    check_ok(proc)
    doc = json.loads((out / "out.json").read_text())
    assert doc["argv"][0].endswith("epoch_time.py") and "--smoke-cpu" in doc["argv"], doc["argv"]
    summaries = {r["name"]: r["summary"] for r in doc["results"]}
    assert set(summaries) == {"example", *OURS} and all(summaries.values()), summaries
    for name, s in summaries.items():
        assert 0 <= s["data_wait_fraction"] <= 1 and s["compile_s"] > 0, (name, s)
    # pmap and sharded take the same steps: on CPU they train identical parameters
    assert summaries[OURS[0]]["final_accuracy"] == summaries[OURS[1]]["final_accuracy"], summaries
    header = doc["table"].splitlines()[0]
    assert "data wait" in header and "compile s" in header, header
    assert doc["table"] in proc.stdout
    assert (out / "out.png").read_bytes().startswith(PNG_MAGIC)


def test_plot_from_redraws_without_running(smoke):
    proc, out = smoke
    check_ok(proc)
    again = bench("--plot-from", str(out / "out.json"), "--plot", str(out / "again.png"), timeout=120)
    check_ok(again)
    assert (out / "again.png").read_bytes().startswith(PNG_MAGIC)
    assert again.stdout.strip() == f"wrote {out / 'again.png'}"  # nothing ran


def test_scaling_smoke_runs_both_layouts_with_identical_replicas(small_lmdb, tmp_path):
    """Four runs (1 and 2 devices, each layout), each compiling afresh: small_lmdb keeps their epochs short."""
    out = tmp_path / "scaling.json"
    proc = bench(
        "--smoke-cpu",
        "--gpus",
        "1,2",
        "--layouts",
        "node,process",
        "--epochs",
        "2",
        "--steps-per-call",
        "4",
        "--data",
        str(small_lmdb),
        "--work-dir",
        str(tmp_path / "runs"),
        "--out",
        str(out),
        timeout=240,
        script=SCALING,
    )
    check_ok(proc)
    doc = json.loads(out.read_text())
    runs = {(r["gpus"], r["layout"]): r for r in doc["runs"]}
    assert len(doc["runs"]) == 4 and set(runs) == {(1, "node"), (1, "process"), (2, "node"), (2, "process")}, runs
    for (gpus, layout), r in runs.items():
        s = r["summary"]
        assert s["replicas"] == gpus and s["replicas_identical"], (gpus, layout, r["checksums"])
        assert s["train_images_per_s"] > 0 and s["efficiency"] is not None, (gpus, layout, s)
        assert ("--processes" in r["command"]) == (layout == "process"), r["command"]
    assert runs[1, "node"]["summary"]["efficiency"] == runs[1, "process"]["summary"]["efficiency"] == 1.0
    assert "efficiency" in doc["table"].splitlines()[0] and doc["table"] in proc.stdout


def test_components_smoke_times_every_part(mnist_lmdb, tmp_path):
    """Both codec sets decode the same first batch; every data cell and both CUDA-graph settings are timed."""
    out = tmp_path / "components.json"
    proc = bench(
        "--data",
        str(mnist_lmdb),
        "--smoke-cpu",
        "--readers",
        "2",
        "--data-grid",
        "1x1x2,2x1x2",
        "--steps",
        "48",
        "--out",
        str(out),
        timeout=300,
        script=COMPONENTS,
    )
    check_ok(proc)
    doc = json.loads(out.read_text())
    settings = [(r["component"], r["setting"]) for r in doc["rows"]]
    assert [c for c, _ in settings] == ["codecs", "codecs", *["data"] * 4, "steps", "steps"], settings
    assert [s.split(":")[0] for c, s in settings if c == "data"] == ["shards", "global"] * 2  # the order's price
    codecs = [r for r in doc["rows"] if r["component"] == "codecs"]
    assert codecs[0]["first_batch_sum"] == codecs[1]["first_batch_sum"] > 0
    assert all(r["images_per_s"] > 0 and r["build_s"] > 0 for r in codecs)
    assert all(r["epoch_s"] > 0 for r in doc["rows"] if r["component"] != "codecs")
    assert "the same with both: yes" in proc.stdout and doc["table"] in proc.stdout


def test_imagenet_smoke_measures_each_part(tmp_path):
    """benchmarks/imagenet.py synthesises its data, then times DALI alone in the global order and a
    `dali-launch train` run, each in its own process, on 1 and 2 devices (2 in both layouts: one process
    driving both, a process each), and draws them. The step alone and DALI alone in the shard order: the
    ViT test below (each part is a process of its own, a minute of CI's two cores each)."""
    out, png = tmp_path / "imagenet.json", tmp_path / "imagenet.png"
    proc = bench(
        *("--data", str(tmp_path / "synth"), "--synth", "64", "--classes", "4", "--gpus", "1,2"),
        *("--parts", "data-global,train", "--epochs", "2", "--calls", "2", "--smoke-cpu"),
        *("--out", str(out), "--plot", str(png)),
        timeout=900,
        script=REPO / "benchmarks" / "imagenet.py",
    )
    check_ok(proc)
    rows = {(r["part"], r["gpus"], r.get("layout")): r for r in json.loads(out.read_text())["rows"]}
    parts = [("data-global", g, None) for g in (1, 2)]
    trains = [("train", 1, "node"), ("train", 2, "node"), ("train", 2, "process")]
    assert sorted(rows, key=str) == sorted(parts + trains, key=str)
    assert all(r["images_per_s_per_gpu"] > 0 for r in rows.values())
    assert rows["data-global", 2, None]["resolved"]["sample_order"] == "global"
    one = rows["train", 1, "node"]
    assert one["argv"][0] == "train" and "--precision" in one["argv"] and one["scaling"] == 1.0
    assert rows["train", 2, "process"]["argv"][:3] == ["--local", "--processes", "2"]
    for key in trains:
        r = rows[key]
        last = r["epochs"][-1]
        assert len(r["epochs"]) == 2 and last["images_per_s"] == pytest.approx(key[1] * last["images_per_s_per_device"])
        assert r["scaling"] == r["images_per_s_per_gpu"] / one["images_per_s_per_gpu"], key
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_nnx_step_smoke_times_linen_and_both_nnx_adapters(tmp_path):
    """The Linen CNN, its NNX twin through the split adapter and through Flax's bridge, in the trainer's own
    device call: each compiled and timed, each ratio to Linen's given. One step a call here: XLA:CPU
    compiles a fused scan of convolutions for a minute on two cores (the GPU command fuses 24)."""
    out = tmp_path / "nnx_step.json"
    argv = ["--smoke-cpu", "--steps", "2", "--steps-per-call", "1", "--batch-size", "4", "--rounds", "2"]
    proc = bench(*argv, "--out", str(out), timeout=240, script=NNX_STEP)
    check_ok(proc)
    doc = json.loads(out.read_text())
    rows = {r["name"]: r for r in doc["results"]}
    assert list(rows) == ["linen", "split", "bridge"] and rows["linen"]["vs_linen"] == 1.0, rows
    for name, r in rows.items():
        assert len(r["epochs_s"]) == 2 and r["compile_s"] > 0 and r["ms_per_step"] > 0, (name, r)
        assert 0 < r["mean_loss"] < 10, (name, r)  # trained: finite, about ln(10) on random labels
    assert "cnn-nnx" in rows["split"]["label"] and "the faster NNX adapter is" in doc["table"]
    assert doc["environment"]["jax"] and doc["table"] in proc.stdout


def test_step_levers_smoke_times_each_kind_of_lever_against_the_baseline(tmp_path):
    """benchmarks/step_levers.py: the trainer's device call once per lever in one process, each kind of lever
    (the batch, XLA options, BatchNorm statistics, donation) and the baseline twice, each with its ratio to
    the first baseline. A subset: XLA:CPU compiles every lever anew."""
    out = tmp_path / "levers.json"
    chosen = "batch-384,autotune-0,batchnorm-compute,no-donation,deterministic"
    argv = ["--smoke-cpu", "--seconds", "0.1", "--levers", chosen, "--out", str(out), "--trace", str(tmp_path / "t")]
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "step_levers.py"), *argv],
        capture_output=True,
        cwd=REPO,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO / "tests")},
    )
    check_ok(proc)
    doc = json.loads(out.read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    assert list(rows) == ["baseline", *chosen.split(","), "baseline-again"], list(rows)
    assert all(r["images_per_s"] > 0 and r["compile_s"] > 0 for r in rows.values()), rows
    assert rows["baseline"]["options"] == {"xla_gpu_enable_command_buffer": ""}  # what --cuda-graphs auto sets
    assert rows["autotune-0"]["options"] == {"xla_gpu_enable_command_buffer": "", "xla_gpu_autotune_level": "0"}
    assert rows["batch-384"]["batch"] == 6 and rows["no-donation"]["donate"] is False
    assert rows["deterministic"]["options"] == {**rows["baseline"]["options"], **dict(determinism.GPU_XLA_FLAGS)}
    traced = {p.parts[-5] for p in (tmp_path / "t").glob("*/plugins/profile/*/*.trace.json.gz")}
    assert traced == set(rows), traced  # kernel_time.py's input, one per lever
    assert "x baseline" in doc["table"] and doc["table"] in proc.stdout


def test_startup_smoke_times_a_cold_and_a_warm_launch(small_lmdb, tmp_path):
    """benchmarks/startup.py: two `dali-launch --local` runs in one run root, launch -> first step and the
    start-up phases of each; the second finds every program in the run root's cache."""
    out = tmp_path / "startup.json"
    argv = ["--smoke-cpu", "--data", str(small_lmdb), "--out", str(out)]
    check_ok(bench(*argv, timeout=600, script=REPO / "benchmarks" / "startup.py"))
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2 and all(r["first_step_s"] > 0 and r["first_eval_s"] > 0 for r in rows), rows
    assert rows[0]["checksums"] == rows[1]["checksums"]  # the second run's programs are the first's, from the cache
    assert list(rows[0]["startup"]) == [
        "jax initialized",
        "imports",
        "checkpoints read",
        "pipelines built",
        "model initialised",
        "first step",
    ], rows[0]["startup"]


def test_against_smoke_times_the_defaults_beside_older_code_and_a_variant(small_lmdb, tmp_path):
    """benchmarks/against.py: the defaults, a variant and `--code` (here this very tree, through the links it
    makes) in ABBA passes; the tree run as older code trains the same bits as the defaults (one program on one
    CPU), the variant resolves what its flag says."""
    out = tmp_path / "against.json"
    argv = ["--smoke-cpu", "--data", str(small_lmdb), "--epochs", "2", "--passes", "2", "--out", str(out)]
    argv += ["--code", f"tree={REPO}", "--variant", "host=--decoded-cache 64M", "--max-ratio", "100"]
    check_ok(bench(*argv, timeout=600, script=REPO / "benchmarks" / "against.py"))
    doc = json.loads(out.read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    assert list(rows) == ["head", "host", "tree"] and doc["result"]["pass"], doc["table"]
    assert [run["pass"] for run in rows["head"]["runs"]] == [0, 1] and rows["tree"]["env"]
    assert rows["tree"]["runs"][0]["checksums"] == rows["head"]["runs"][0]["checksums"]
    assert {run["decoded_cache"] for run in rows["host"]["runs"]} == {"host"}
    assert {run["decoded_cache"] for run in rows["head"]["runs"]} == {"off"}


def test_sample_check_times_the_pre_flight_check(tmp_path):
    """benchmarks/sample_check.py --smoke-cpu: 300 files checked, then from the cache, extrapolated to ImageNet's."""
    out = tmp_path / "check.json"
    check_ok(bench("--smoke-cpu", "--out", str(out), timeout=120, script=REPO / "benchmarks" / "sample_check.py"))
    result = json.loads(out.read_text())
    assert result["files"] == 300 and 0 < result["cached_s"] and 0 < result["check_s"]
    assert result["imagenet_check_s"] == pytest.approx(result["check_us"] * 1.281167, rel=0.01, abs=0.2)


def test_bad_samples_gpu_script_smoke(tmp_path):
    """benchmarks/bad_samples_gpu.py --smoke-cpu: the pre-flight cases end in one line naming the file."""
    out = tmp_path / "bad.json"
    proc = bench("--smoke-cpu", "--out", str(out), timeout=300, script=REPO / "benchmarks" / "bad_samples_gpu.py")
    check_ok(proc)
    result = json.loads(out.read_text())
    assert result["ok"] and [c["case"] for c in result["cases"]] == ["text", "truncated"]
    assert all(c["exit"] == 2 and "00000001.jpg" in result["cases"][0]["line"] for c in result["cases"])


def test_imagenet_smoke_of_a_vit_with_augmentation_and_mixing(tmp_path):
    """The ViT recipe's workload through benchmarks/imagenet.py (vit-ti16 stands in for vit-s16 on CPU): the step
    with mixing and without, DALI alone with RandAugment; the table says the flags and the resolved attention."""
    out = tmp_path / "vit.json"
    proc = bench(
        *("--data", str(tmp_path / "synth"), "--synth", "32", "--classes", "4", "--gpus", "1", "--calls", "2"),
        *("--model", "vit-s16", "--augment", "randaugment", "--mixup", "0.8", "--cutmix", "1.0"),
        *("--parts", "step,step-unmixed,data", "--smoke-cpu", "--out", str(out)),
        timeout=600,
        script=REPO / "benchmarks" / "imagenet.py",
    )
    check_ok(proc)
    doc = json.loads(out.read_text())
    rows = {r["part"]: r for r in doc["rows"]}
    assert sorted(rows) == ["data", "step", "step-unmixed"] and all(
        r["images_per_s_per_gpu"] > 0 for r in rows.values()
    )
    assert doc["workload"] | {"model": "vit-ti16", "augment": "randaugment", "mixup": 0.8} == doc["workload"]
    assert rows["step"]["resolved"]["attention"] == "xla"
    first = doc["table"].splitlines()[0]
    assert first.startswith("--model vit-ti16") and "--cutmix 1.0" in first and "attention xla" in first, first
    assert "unmixed" in doc["table"].splitlines()[1]


def test_deterministic_smoke_cuts_resumes_and_passes_on_the_cpu(tmp_path, small_lmdb):
    """benchmarks/deterministic.py on CPU devices: the baseline, --deterministic twice (the second from the
    first's compile cache), a run SIGKILLed mid-way through epoch 1 and resumed, DALI's pipelines built twice,
    and the `before` runs (here the same code, linked as --before: the workload, one MLP run each). On the CPU
    --deterministic sets nothing, so the baseline's bits are the deterministic runs' too."""
    out = tmp_path / "deterministic.json"
    proc = bench(
        *("--data", str(tmp_path / "synth"), "--synth", "96", "--classes", "4", "--epochs", "2"),
        *("--checkpoint-every-steps", "2", "--smoke-cpu", "--out", str(out), "--variants", "det,data,before"),
        *("--before", str(REPO), "--mnist", str(small_lmdb), "--mlp-epochs", "1", "--mlp-runs", "1"),
        timeout=600,
        script=REPO / "benchmarks" / "deterministic.py",
    )
    check_ok(proc)
    doc = json.loads(out.read_text())
    result, rows = doc["result"], doc["rows"]
    assert (result["deterministic"], result["data_same_twice"]) == ("PASS", True), doc["table"]
    cut = rows["det-cut"]
    assert cut["killed_at"]["epoch"] == 1 and cut["killed_at"]["calls_done"] > 0 and "resumed from" in cut["resumed"]
    assert [e["epoch"] for e in cut["epochs"]] == [0, 1] and cut["epochs"][1]["resumed_at_call"]
    assert rows["baseline"]["checksums"] == rows["det-1"]["checksums"] and rows["det-1"]["xla_flags"] == {}
    assert "--deterministic: PASS" in proc.stdout
    assert rows["before"]["checksums"] == rows["baseline"]["checksums"], doc["table"]  # one code, one program
    assert rows["before"]["env"]["PYTHONPATH"] and not rows["mlp-1"]["env"] and rows["mlp-1"]["images_per_s"] > 0
    assert {"default_vs_before", "mlp_vs_before", "default_order"} <= result.keys(), result


def test_scale_smoke_counts_file_operations_and_names_the_killed_rank(small_lmdb, tmp_path):
    """benchmarks/scale.py at N = 2, local mode: while the ranks train, the only file work of the steps is
    the watchdog's (its heartbeat, the job's cause, one peer's heartbeat every 2 s), besides what is written
    beside them (asynchronous checkpoints, the compile cache); the evaluation ran on both processes;
    SIGKILL of rank 1 ends every rank within 30 s, and the launcher names it first."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scale_probe import BACKGROUND

    out = tmp_path / "scale.json"
    proc = bench(
        "--data",
        str(small_lmdb),
        "--processes",
        "2",
        "--modes",
        "local",
        "--epochs",
        "2",
        "--global-batch-size",
        "32",
        "--work-dir",
        str(tmp_path / "runs"),
        "--out",
        str(out),
        "--plot",
        str(tmp_path / "scale.png"),
        timeout=300,
        script=REPO / "benchmarks" / "scale.py",
    )
    check_ok(proc)
    [row] = json.loads(out.read_text())["rows"]
    # 3 per 2 s interval; none per step (the operations counted as a step's, by rank, name the cause)
    assert 0 < row["watchdog_ops_rank_s"] <= 2.0 and row["step_ops_rank"] == 0, (row["step_events"], row)
    steady_files = {key.split()[1] for key in row["steady_ops_by_file_per_rank_s"]} - set(BACKGROUND)
    assert steady_files <= {"heartbeats", "endings"}, row  # besides background checkpoints and the compile cache
    assert row["startup_ops_rank"] < 45, row  # O(1) files per rank besides the watchdog's (39 measured)
    assert row["eval_devices"] == 2 and row["eval_1_cached_s"] > 0 and row["save_s"] > 0, row
    assert row["named_first"] and row["ranks_gone_s"] < 30, row
    assert (tmp_path / "scale.png").read_bytes().startswith(PNG_MAGIC)


def test_multi_gpu_smoke_runs_the_examples_two_device_loop_and_ours(small_lmdb, tmp_path):
    """benchmarks/multi_gpu.py --smoke-cpu: the example's pmap section on two CPU devices (in a child process),
    then ours through the CLI in both layouts, cold, and the first again on its warm compile cache."""
    out = tmp_path / "multi_gpu.json"
    argv = ["--smoke-cpu", "--data", str(small_lmdb), "--epochs", "2", "--work-dir", str(tmp_path / "runs")]
    proc = bench(*argv, "--out", str(out), timeout=600, script=REPO / "benchmarks" / "multi_gpu.py")
    check_ok(proc)
    results = json.loads(out.read_text())["results"]
    assert [r["name"] for r in results] == [
        "example 1 proc x 2 GPU (no averaging)",
        "ours 2 proc x 1 GPU sharded k=0 (cold)",
        "ours 1 proc x 2 GPU sharded k=0 (cold)",
        "ours 2 proc x 1 GPU sharded k=0 (warm)",
    ], results
    assert all(len(r["epochs"]) == 2 and not r.get("failed") for r in results), results
    assert results[1]["command"][1] == "--local" and results[1]["first_step_s"] > 0  # after the CLI's module
    assert results[2]["command"][1] == "train" and "cpu" in results[2]["command"]
