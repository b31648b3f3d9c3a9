"""benchmarks/autotune_diff.py (issue 38): two runs' kept autotuning picks compared kernel by kernel, on two
folders of pick files written the way XLA's per-fusion autotuning cache writes them (text protos)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, check_ok

PICK = """version: 3
results {{
  device: "CUDA: 9.0, Cores: 132"
  hlo: "%custom-call = (bf16[256,56,56,64]{{3,2,1,0}}) custom-call(), custom_call_target=\\"{target}\\""
  result {{
    run_time {{
      nanos: {nanos}
    }}
    {kind} {{
      algorithm: 7
    }}
  }}
}}
"""


def write(folder, picks: dict) -> None:
    folder.mkdir()
    for name, (target, kind, nanos) in picks.items():
        (folder / f"{name}.textproto").write_text(PICK.format(target=target, kind=kind, nanos=nanos))


def test_autotune_diff_totals_shared_kernels_by_kind_and_ranks_what_grew(tmp_path):
    conv, gemm = "__cudnn$convBackwardFilter", "__cublas$lt$matmul"
    write(tmp_path / "base", {"a": (conv, "conv", 1000), "b": (gemm, "gemm", 500), "c": (conv, "conv", 100)})
    write(tmp_path / "det", {"a": (conv, "conv", 4000), "b": (gemm, "gemm", 600), "d": (gemm, "gemm", 50)})
    out = tmp_path / "diff.json"
    script = REPO / "benchmarks" / "autotune_diff.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "base"), str(tmp_path / "det"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    check_ok(proc)
    result = json.loads(out.read_text())
    assert result["files"] == {"base": 3, "other": 3, "shared": 2}
    assert result["by_kind"][f"conv:{conv}"] == {"kernels": 1, "base_ns": 1000, "other_ns": 4000}
    assert result["grown"][0]["file"] == "a.textproto"  # +3,000 ns, before b's +100
    assert (result["only_base_ns"], result["only_other_ns"]) == (100, 50)
    assert conv[:40] in proc.stdout
