"""What reaches the console and what the logs keep: the progress bar only on a terminal, never in a rank's
log; other libraries' chatter (gloo, glog info and warnings, tensorboardX) in the logs, not the console."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import time

import pytest
from conftest import CLI, REPO
from run_readers import only_run

from dali_launch.launcher.console import is_chatter


@pytest.mark.parametrize(
    "line, chatter",
    [
        ("[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1", True),
        ("I1201 23:01:52.123456  1234 gloo_context.cc:61] ready", True),
        ("W0000 00:00:1733100000.123456   4242 cuda_executor.cc:1040] numa node", True),
        ("Warning: NaN or Inf found in input tensor.", True),
        ("submitit INFO (2026-12-06 03:44:40,747) - Starting with JobEnvironment(job_id=1926)", True),
        ("ERROR:submitit:Submitted job triggered an exception", True),
        ("E1201 23:01:52.123456  1234 cuda_driver.cc:101] failed to allocate 80.0G", False),  # errors stay
        ("epoch 0: loss 0.1234  test accuracy 0.9", False),
        ("dali-launch: error: rank 1 failed: RuntimeError: boom", False),
    ],
)
def test_chatter_is_told_from_what_a_user_reads(line, chatter):
    assert is_chatter(line) == chatter and is_chatter(line.encode()) == chatter


@pytest.mark.slow
def test_the_progress_bar_is_drawn_on_the_terminal_and_not_in_the_log(small_lmdb, tmp_path):
    """`dali-launch train` in a pseudo-terminal: Rich draws its bar there (carriage returns, ANSI codes), and
    logs/rank-0.log, which `logs --follow` reads, holds the same lines without a frame of it."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    args = ["train", "--data-dir", str(small_lmdb), "--epochs", "1", "--batch-size", "10", "--run-root", str(tmp_path)]
    proc = subprocess.Popen([*CLI, *args], cwd=REPO, stdin=subprocess.DEVNULL, stdout=child, stderr=child)
    os.close(child)
    seen, end = b"", time.monotonic() + 600
    while time.monotonic() < end:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child side closed: the run is over
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=60) == 0, seen.decode(errors="replace")[-3000:]
    os.close(main)
    log = only_run(tmp_path).log(0).read_bytes()
    assert b"\x1b[" in seen and b"epoch 0" in seen  # the bar was there, on the terminal
    assert b"epoch 0: loss" in log and b"\x1b" not in log and b"\r" not in log, log[-2000:]


# gloo's connection line as a rank writes it: in pieces, one write(2) each (strace of a rank)
GLOO = [b"[Gloo] Rank ", b"0", b" is connected to ", b"1", b" peer ranks. ", b"Expected number of connected peer ranks is : ", b"1", b"\n"]  # fmt: skip
CUTS = [b"epoch 0: loss 0.5000\n", b"\x1fa library's line\n", b"\n"]  # ours, a library's (tagged), a blank one


def _interleaved() -> list[tuple[bytes, list[str]]]:
    """Every way a whole line of another writer falls between two of gloo's writes, between two lines of
    ours, and two cuts in one gloo line: (a rank's stream, the lines its console shows)."""
    streams = []
    for cut in CUTS:
        ours = [] if cut.startswith(b"\x1f") or cut == b"\n" else [cut.decode().rstrip()]
        shown = ["rank 0 on vm", *ours, "done"]
        streams += [(b"rank 0 on vm\n" + b"".join(GLOO[:k]) + cut + b"".join(GLOO[k:]) + b"done\n", shown) for k in range(8)]  # fmt: skip
    twice = b"".join([*GLOO[:2], CUTS[0], *GLOO[2:5], b"second\n", *GLOO[5:]])
    return [*streams, (twice + b"done\n", ["epoch 0: loss 0.5000", "second", "done"])]


def test_gloo_cut_by_another_write_stays_off_the_local_console(tmp_path):
    """Each interleaving, through a real pipe, into the pump of the local launcher: the console gets our lines
    whole and none of gloo's pieces (1 in 5 runs of 2 ranks showed them before); the log keeps every byte."""
    from dali_launch.launcher.backends.local import LocalRanks
    from dali_launch.launcher.run_config import RunConfig
    from dali_launch.trainer.run_dir import RunPaths

    for n, (stream, expected) in enumerate(_interleaved()):
        paths, shown, written = RunPaths(tmp_path / str(n)), [], tmp_path / f"{n}.bytes"
        paths.logs.mkdir(parents=True)
        written.write_bytes(stream)
        proc = subprocess.Popen(["cat", str(written)], stdout=subprocess.PIPE)
        LocalRanks(RunConfig(), paths, echo=shown.append)._pump(0, proc)
        proc.wait(timeout=30)
        assert shown == [f"[rank 0] {line}" for line in expected], (stream, shown)
        assert paths.log(0).read_bytes() == stream.replace(b"\x1f", b"")


def test_gloo_cut_by_another_write_stays_off_a_followed_jobs_console(tmp_path):
    """The same streams as a SLURM task's output file, read by the follower."""
    from dali_launch.launcher.backends import follow
    from dali_launch.trainer.run_dir import RunPaths

    for n, (stream, expected) in enumerate(_interleaved()):
        out, shown = tmp_path / f"{n}.out", []
        out.write_bytes(stream)
        follow._print_new([(0, follow.LogTail(out))], shown.append, RunPaths(tmp_path))
        assert shown == [f"[rank 0] {line}" for line in expected], (stream, shown)
