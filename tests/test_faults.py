"""A rank a fatal signal ends (a segfault in a native library) leaves its stacks where the launcher, `status`
and its peers look: endings/rank-N.fault (read as a `failed` ending naming the signal and the frame) and
its logs. A real process, a real SIGSEGV; no JAX needed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap

from dali_launch.trainer.resilience import ending
from dali_launch.trainer.run_dir import RunPaths

CRASH = textwrap.dedent(
    """
    import ctypes, sys
    from pathlib import Path
    from dali_launch.trainer.resilience import ending
    from dali_launch.trainer.run_dir import RunPaths

    def deep_inside_a_library():
        ctypes.string_at(0)

    ending.record_faults(RunPaths(sys.argv[1]), 1, Path(sys.argv[2]))
    print("about to crash", flush=True)
    deep_inside_a_library()
    """
)


def test_a_segfault_leaves_its_stacks_in_endings_and_the_logs(tmp_path):
    paths, log = RunPaths(tmp_path / "run"), tmp_path / "run" / "logs" / "rank-1.log"
    log.parent.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-c", CRASH, str(paths.root), str(log)], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGSEGV
    for text in (paths.fault(1).read_text(), log.read_text(), proc.stderr):  # its own file, its log, its stderr
        assert "Fatal Python error: Segmentation fault" in text and "deep_inside_a_library" in text, text
    # `train` has no launcher left to say it: the copier's own last line (given the log, as `train` gives it)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"dali-launch: error: the run died: Segmentation fault; its stacks are in {paths.fault(1)}"
    )
    (failed,) = ending.read(paths)
    assert failed["rank"] == 1 and failed["how"] == ending.FAILED
    # the crashing thread's innermost frame: here ctypes' own
    assert re.fullmatch(
        rf"rank 1 died: Segmentation fault in __init__\.py:\d+ \(string_at\); its stacks are in {paths.fault(1)}",
        failed["line"],
    ), failed["line"]


def test_a_rank_that_ends_well_leaves_no_fault_file(tmp_path):
    paths = RunPaths(tmp_path / "run")
    code = "import sys; from dali_launch.trainer.resilience import ending; from dali_launch.trainer.run_dir import RunPaths; ending.record_faults(RunPaths(sys.argv[1]), 0)"
    subprocess.run([sys.executable, "-c", code, str(paths.root)], check=True, timeout=60)
    assert not paths.fault(0).exists() and ending.read(paths) == []
