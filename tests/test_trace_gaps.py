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
