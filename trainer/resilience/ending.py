"""How a task ends, written where its peers and the launcher look: `endings/rank-N.json` of the run.

    done      the rank finished (its silence from then on is no failure)
    failed    it raised; `line` is "rank N failed: " and the exception's last line
    stopped   a signal stopped it after an agreed checkpoint (`step`)
    verdict   its watchdog gave up on a peer (`culprit`): "rank M made no progress for ..."

A rank that a fatal signal ends (SIGSEGV in a native library, SIGABRT, SIGBUS, SIGFPE) cannot write its
ending; Python's faulthandler dumps its threads' stacks instead, into a pipe to a small copier process that
outlives it by a moment: `endings/rank-N.fault`, the rank's stderr (its log) and, for `train`, its log
file. `read` (and `of`) take a non-empty fault file for a `failed` ending, with the signal and the top frame.

The first `failed` or `verdict` of a job is also its cause, `endings/cause.json`, claimed by a hard
link (one rank wins, readers never see half a file): that one file is what every rank's watchdog,
the local launcher and the SLURM follow loop look at every few seconds, so none of them scans N
endings per interval (O(1) per rank; `read`, which does, runs once when a job's end is reported).
Peers act on the cause within seconds; the local launcher names the earliest ending first. A rank
that raises in a job of several processes also leaves without JAX's shutdown barrier, which would
keep it (and so the job) alive for up to 300 s while its peers wait in a collective for it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, note, read_json, write_atomic

DONE, FAILED, STOPPED, VERDICT = "done", "failed", "stopped", "verdict"
CAUSES = (FAILED, VERDICT)  # endings that end the whole job
EXIT_FAILED = 1
EXIT_WATCHDOG = 4  # the watchdog left on the job's cause or its own verdict (watchdog.py)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def record(paths: RunPaths, rank: int, how: str, line: str = "", **facts) -> None:
    """Best effort: an unwritable run directory must not hide the error being recorded."""
    text = json.dumps({"rank": rank, "how": how, "line": line, "at": time.time(), **facts})
    try:
        write_atomic(paths.ending(rank), text)
        if how in CAUSES:
            _claim_cause(paths, rank, text)
    except OSError:
        pass


def _claim_cause(paths: RunPaths, rank: int, text: str) -> None:
    """The job's first cause: written beside, then hard-linked into place, which fails if another rank's
    is there already (link is atomic on local file systems and NFS alike)."""
    mine = paths.endings / f".cause-{rank}.tmp"
    mine.write_text(text)
    try:
        os.link(mine, paths.cause)
    except FileExistsError:
        pass
    finally:
        mine.unlink(missing_ok=True)


def cause(paths: RunPaths, since: float = 0.0) -> dict | None:
    """The job's first failure or verdict written at or after `since`, or None: one file, one open."""
    found = _valid(paths.cause, read_json(paths.cause))
    return found if found and found["at"] >= since else None


def explained_by(paths: RunPaths, since: float = 0.0) -> int | None:
    """The rank that ended the job in a line of ours (a refused checkpoint write, say), or None: what the others
    print after it is their reaction, which the launchers keep in the logs."""
    found = cause(paths, since)
    return found["rank"] if found and found.get("explained") else None


def of(paths: RunPaths, rank: int) -> dict | None:
    """How `rank` ended (its fault dump's `failed` if a fatal signal ended it), or None while it has not."""
    return _valid(paths.ending(rank), read_json(paths.ending(rank))) or fault_ending(paths, rank)


def clear(paths: RunPaths, rank: int) -> None:
    """A resumed or requeued run starts without its earlier ending and heartbeat (and process 0 removes
    the earlier cause). Called before jax.distributed.initialize, a rendezvous: no peer's watchdog reads the
    cause before it met the others there, after every rank did this (watchdog.py: until then a watchdog
    reads only its peer's heartbeat, which says the start of the job it belongs to)."""
    paths.ending(rank).unlink(missing_ok=True)
    paths.heartbeat(rank).unlink(missing_ok=True)
    if rank == 0:
        paths.cause.unlink(missing_ok=True)
    paths.fault(rank).unlink(missing_ok=True)


# The copier: what the dying rank writes into its stdin goes to each file (made only then) and to
# stderr, until EOF; then, if told (`train`: no launcher outlives the process to say it), one last line.
_COPIER = (
    "import os,re,signal,sys\n"
    "signal.signal(signal.SIGINT,signal.SIG_IGN)\n"
    "say,files,out,seen=sys.argv[1]=='say',sys.argv[2:],None,b''\n"
    "while (chunk:=os.read(0,65536)):\n"
    " out,seen=out or [open(p,'ab') for p in files],seen+chunk\n"
    " [(f.write(chunk),f.flush()) for f in out]\n"
    " os.write(2,chunk)\n"
    "m=re.search(rb'Fatal Python error: (.+)',seen)\n"
    "if say and m:os.write(2,b'dali-launch: error: the run died: '+m.group(1).strip()+b'; its stacks are in '+files[0].encode()+b'\\n')\n"
)


def record_faults(paths: RunPaths, rank: int, log: Path | None = None) -> None:
    """From now on a fatal signal leaves this rank's stacks in endings/rank-N.fault, its stderr and `log`.
    The copier runs in its own session (a local launcher's kill of the rank's group spares it) and ends at
    EOF: when this process ends, however it ends."""
    paths.endings.mkdir(parents=True, exist_ok=True)
    files = [str(paths.fault(rank)), *([str(log)] if log else [])]
    while _COPIERS:  # an earlier task of this process (benchmarks run several): its copier sees EOF and ends
        _COPIERS.pop().stdin.close()
    try:
        copier = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _COPIER, "say" if log else "quiet", *files],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        faulthandler.enable(all_threads=True)  # stderr alone is better than nothing
        return
    faulthandler.enable(file=copier.stdin, all_threads=True)
    _COPIERS.append(copier)  # kept: its pipe must stay open as long as this process lives


_COPIERS: list = []
_FATAL = re.compile(r"Fatal Python error: (.+)")
_FRAME = re.compile(r'\s+File "(.+)", line (\d+) in (\S+)')


def fault_ending(paths: RunPaths, rank: int) -> dict | None:
    """The `failed` ending a fault dump stands for: what killed the rank, and where it was."""
    path = paths.fault(rank)
    try:
        text, at = path.read_text(errors="replace"), path.stat().st_mtime
    except OSError:
        return None
    fatal = _FATAL.search(text)
    if not fatal:
        return None
    current = text.find("Current thread", fatal.end())  # the thread that took the signal
    frame = _FRAME.search(text[current if current >= 0 else fatal.end() :])
    where = f" in {Path(frame.group(1)).name}:{frame.group(2)} ({frame.group(3)})" if frame else ""
    line = f"rank {rank} died: {fatal.group(1).strip()}{where}; its stacks are in {path}"
    return {"rank": rank, "how": FAILED, "line": line, "at": at, "fault": True}


def read(paths: RunPaths, since: float = 0.0) -> list[dict]:
    """Every rank's ending written at or after `since` (time.time()), earliest first."""
    found = []
    for path in paths.endings.glob("rank-*.json") if paths.endings.is_dir() else []:
        ending = _valid(path, read_json(path))  # None: removed while we looked, or damaged (noted)
        if ending and ending["at"] >= since:
            found.append(ending)
    ended = {e["rank"] for e in found}
    for path in paths.endings.glob("rank-*.fault") if paths.endings.is_dir() else []:
        rank = int(path.stem.split("-")[1])
        fault = None if rank in ended else fault_ending(paths, rank)
        if fault and fault["at"] >= since:
            found.append(fault)
    return sorted(found, key=lambda e: e["at"])


def _valid(path: Path, ending: dict | None) -> dict | None:
    """An ending as written (its rank, how, line and time), else None; one that is not is noted."""
    if ending is None:
        return None
    if not (isinstance(ending.get("rank"), int) and ending.get("how") and isinstance(ending.get("at"), (int, float))):
        note(path, "is damaged (no rank, how or time in it); read as missing")
        return None
    return {"line": "", **ending}


def last_line(error: BaseException) -> str:
    """`Type: last line of the message`: JAX wraps a callback's error in pages of text, whose last
    line is the one that says what happened. Our own one-line errors (UsageError) are said as they are."""
    if isinstance(error, UsageError):
        return str(error)
    lines = [line for line in str(error).splitlines() if line.strip() and not line.startswith("---")]
    lines = [line for line in lines if not line.startswith("For simplicity, JAX has removed")]
    return f"{type(error).__name__}: {lines[-1].strip()}" if lines else type(error).__name__


@contextlib.contextmanager
def failures_recorded(paths: RunPaths, rank: int, several_processes: bool):
    """An exception inside is recorded as this rank's `failed` ending, then propagates (Python prints
    the traceback; submitit pickles it). With peers, the process then exits at once: our atexit
    hook, registered after JAX's, runs first (LIFO) and skips JAX's shutdown barrier."""
    try:
        yield
    except Exception as error:
        # `explained`: our own one-line error, which says what happened and the fix: the launchers print
        # that line alone (a traceback printed beside it, an Orbax thread's, stays in the rank's log)
        # `resumable`: False where resuming would do the same again (a run whose every step diverged)
        said, resumable = f"rank {rank} failed: {last_line(error)}", getattr(error, "resumable", True)
        record(paths, rank, FAILED, said, explained=isinstance(error, UsageError), resumable=resumable)
        if several_processes:
            atexit.register(_exit_now, EXIT_FAILED)
        raise


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def leave(code: int) -> None:
    """Ends a process whose work is done, as the interpreter would but without its teardown: threads that
    are not daemons joined, the atexit handlers run (JAX's, logging's, ours), the standard streams flushed
    (a `train` log's tee with them), then `os._exit`. Unloading XLA's and DALI's native state took 0.4-0.5 s
    of every trainer process on the 2-core machine (after `done:`, before the exit); a run's own files are
    closed by then (the reporter's, the checkpointer's)."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            # Orbax's threads raise their own failure again from join(): a refused checkpoint write the run's
            # one line has told (a `train` on a full disk printed its 40-line traceback after that line).
            with contextlib.suppress(Exception):
                thread.join()
    if dali := sys.modules.get("nvidia.dali.backend"):  # its handler: a full collection (0.12 s) for a teardown
        atexit.unregister(getattr(dali, "_unload_dali", None))  # that os._exit skips
    atexit._run_exitfuncs()
    _exit_now(code)


def die_with_parent(parent_pid: int) -> None:
    """Never outlive the local launcher: the kernel kills this process when its parent dies
    (PR_SET_PDEATHSIG; Linux). SIGKILL, not a polite signal: with the launcher gone nobody reads
    our output, so there is nothing left to save for. The parent may have died before the call."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux: no prctl
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(EXIT_FAILED)
