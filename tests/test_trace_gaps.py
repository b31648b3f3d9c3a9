"""benchmarks/trace_gaps.py on a trace laid out as JAX's profiler writes it."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

from conftest import REPO

SCRIPT = REPO / "benchmarks" / "trace_gaps.py"


def meta(kind: str, pid: int, name: str, tid: int = 0) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def span(pid: int, tid: int, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur}


def run(path, *args) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(SCRIPT), str(path), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_gaps_of_the_busiest_stream_and_what_the_host_did(tmp_path):
    events = [
        meta("process_name", 1, "/device:GPU:0"),
        meta("thread_name", 1, "Stream #14(Compute)", 14),
        meta("thread_name", 1, "Stream #50(Compute)", 50),
        meta("process_name", 2, "/host:CPU"),
        meta("thread_name", 2, "python3", 7),
        # XLA's stream: 0-1000 us, idle 1000-3000 (the host waits for DALI), 3000-4000, 4100-5000
        span(1, 14, "conv", 0, 1000),
        span(1, 14, "conv", 3000, 1000),
        span(1, 14, "conv", 4100, 900),
        span(1, 50, "nvjpeg", 1500, 200),  # a smaller stream beside it
        span(2, 7, "next", 900, 2050),
        span(2, 7, "pipe.run", 950, 1900),
    ]
    path = tmp_path / "vm.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    proc = run(path, "--min-gap-ms", "0.5")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Stream #14(Compute): 3 events over 5.0 ms, busy 2.9 ms (58.0%)"
    assert lines[1] == "gaps over 0.5 ms: 1, 2.0 ms together (40.0%)"  # the 0.1 ms one is left out
    assert lines[2] == "     2.00 ms at      1.0 ms: host in next > pipe.run"


def test_a_cpu_trace_is_refused_in_one_line(tmp_path):
    path = tmp_path / "cpu.trace.json"
    path.write_text(json.dumps({"traceEvents": [meta("process_name", 2, "/host:CPU"), span(2, 7, "x", 0, 5)]}))
    proc = run(path)
    assert proc.returncode == 2 and "holds no GPU stream" in proc.stderr.splitlines()[-1]


KERNELS = REPO / "benchmarks" / "kernel_time.py"


def kernel(ts: float, dur: float, op: str | None, name: str = "sm90_kernel") -> dict:
    return {**span(1, 14, name, ts, dur), "args": {"hlo_op": op} if op else {}}


def test_kernel_time_sums_each_op_kind_per_step_and_puts_what_differs_first(tmp_path):
    """benchmarks/kernel_time.py: op kinds (HLO names without their numbers) summed on the busiest GPU
    stream of each trace, per step, the kinds two traces differ most in first."""
    gpu = [meta("process_name", 1, "/device:GPU:0"), meta("thread_name", 1, "Stream #14(Compute)", 14)]
    for name, filter_us in (("baseline", 100), ("deterministic", 700)):
        folder = tmp_path / name / "plugins" / "profile" / "2026_12_04"
        folder.mkdir(parents=True)
        events = [
            *gpu,
            kernel(0, 400, "cudnn-conv.3"),
            kernel(400, 400, "cudnn-conv.12"),
            kernel(800, filter_us, "cudnn-conv-bw-filter.73"),
            kernel(2000, 200, None, name="loop_add_fusion_4"),  # no hlo_op: the kernel's own name
        ]
        with gzip.open(folder / "vm.trace.json.gz", "wt") as f:
            json.dump({"traceEvents": events}, f)
    argv = [sys.executable, str(KERNELS), str(tmp_path / "baseline"), str(tmp_path / "deterministic"), "--steps", "2"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    assert rows[0] == ["cudnn-conv-bw-filter", "0.050", "0.350", "0.300"], proc.stdout  # differs most: first
    assert ["cudnn-conv", "0.400", "0.400", "0.000"] in rows and ["loop_add_fusion", "0.100", "0.100", "0.000"] in rows
    assert rows[-1] == ["all", "0.550", "0.850", "0.300"]


def test_kernel_time_refuses_a_folder_without_a_trace_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(KERNELS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2 and f"no *.trace.json.gz in {tmp_path}" in proc.stderr.splitlines()[-1], proc.stderr
