"""benchmarks/mesh_step.py (a GPU benchmark), end to end with --smoke-cpu: ViT-B/16's fsdp layout
against the replicated step (A B B A) and the largest-ViT ladder (each rung a child process), with and
without the optimizer's state in host memory and with the blocks' activations recomputed, at tiny sizes;
and benchmarks/huge_mlp.py, the model benchmarks/gpu.sh's mesh question has refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO, check_ok
from test_benchmark import bench


def test_mesh_step_smoke_times_the_layout_abba_and_a_ladder_rung_in_its_own_process(tmp_path):
    out = tmp_path / "mesh_step.json"
    argv = ["--smoke-cpu", "--seconds", "0.05", "--out", str(out)]
    proc = bench(*argv, timeout=300, script=REPO / "benchmarks" / "mesh_step.py")
    check_ok(proc)
    doc = json.loads(out.read_text())
    assert doc["environment"]["jax"]
    cost = doc["fsdp_cost"]
    assert cost["order"] == ["replicated", "fsdp-layout", "fsdp-layout", "replicated"]
    assert [s["contender"] for s in cost["segments"]] == cost["order"]
    assert all(s["images_per_s"] > 0 and s["calls"] >= 3 for s in cost["segments"]), cost["segments"]
    for name in ("replicated", "fsdp-layout"):
        c = cost["contenders"][name]
        assert c["images_per_s"] > 0 and c["compile_s"] > 0 and c["state_bytes_per_device"] > 0, c
    assert "layout path" in cost["contenders"]["fsdp-layout"]["runner"]
    assert cost["ratio"] > 0 and cost["target_pct"] == 3.0 and isinstance(cost["meets_target"], bool)
    largest = doc["largest"]
    (rung,) = largest["rungs"]
    assert rung["status"] == "trains" and largest["largest_that_trains"] == rung["name"], rung
    for key in ("params", "state_bytes", "gradient_bytes", "memory_fit_need_bytes", "images_per_s", "compile_s"):
        assert rung[key] > 0, (key, rung)
    assert rung["memory_fit_need_bytes"] == rung["state_bytes"] + rung["gradient_bytes"]
    assert rung["memory_fit"].startswith("passes") and "without optimizer-state offload" in largest["offload"]
    # the ladder again with AdamW's moments in host memory: beside the first, a device holding a third of the state
    check_ok(bench(*argv, "--parts", "largest", "--offload", timeout=300, script=REPO / "benchmarks" / "mesh_step.py"))
    doc = json.loads(out.read_text())
    (offloaded,) = doc["largest_offload"]["rungs"]
    assert offloaded["status"] == "trains" and "host memory" in doc["largest_offload"]["offload"], offloaded
    moments = 2 * offloaded["gradient_bytes"]  # and AdamW's step count
    assert 0 < offloaded["host_state_bytes"] - moments <= 8 and doc["largest"]["rungs"] == [rung], offloaded
    assert offloaded["state_bytes"] + offloaded["host_state_bytes"] == rung["state_bytes"], (offloaded, rung)
    # and with each block's activations recomputed (--remat blocks): the same state (the one tiny block saves
    # nothing here: test_vit.py holds the temporaries to a fraction at a size where activations count)
    check_ok(bench(*argv, "--parts", "largest", "--remat", timeout=300, script=REPO / "benchmarks" / "mesh_step.py"))
    doc = json.loads(out.read_text())
    (recomputed,) = doc["largest_remat"]["rungs"]
    assert recomputed["status"] == "trains" and "--remat blocks" in doc["largest_remat"]["activations"], recomputed
    assert recomputed["state_bytes"] == rung["state_bytes"] and "no --remat" in doc["largest"]["activations"]
    assert recomputed["xla_temp_bytes"] > 0 and recomputed["images_per_s"] > 0, recomputed


def test_huge_mlp_is_refused_in_one_line_before_its_state_is_made(tmp_path):
    """gpu.sh's refusal on CPU devices given an H200's pool (XLA's default 75 % of its 139.8 GiB): the same
    257.6 GiB the GPU run counted, refused before 64 GiB of parameters are made."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "benchmarks"), "DALI_LAUNCH_DEVICE_MEMORY_MB": "107418"}
    argv = ["train", "--epochs", "1", "--model", "huge_mlp:huge_mlp", "--optimizer", "adamw"]
    proc = subprocess.run(
        [sys.executable, "-m", "dali_launch.launcher.cli", *argv, "--run-root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "the train state and its gradients need 257.6 GiB per device" in proc.stderr, proc.stderr[-2000:]
    assert "a device has 104.9 GiB" in proc.stderr, proc.stderr[-2000:]
