"""How a task ends, written where its peers and the launcher look: `endings/rank-N.json` of the run.

    done      the rank finished (its silence from then on is no failure)
    failed    it raised; `line` is "rank N failed: " and the exception's last line
    stopped   a signal stopped it after an agreed checkpoint (`step`)
    verdict   its watchdog gave up on a peer (`culprit`): "rank M made no progress for ..."

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
import json
import os
import signal
import sys
import time

from dali_launch.trainer.run_dir import RunPaths, write_atomic

DONE, FAILED, STOPPED, VERDICT = "done", "failed", "stopped", "verdict"
CAUSES = (FAILED, VERDICT)  # endings that end the whole job
EXIT_FAILED = 1
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
    try:
        found = json.loads(paths.cause.read_text())
    except (OSError, ValueError):
        return None
    return found if found["at"] >= since else None


def of(paths: RunPaths, rank: int) -> dict | None:
    """How `rank` ended, or None while it has not."""
    try:
        return json.loads(paths.ending(rank).read_text())
    except (OSError, ValueError):
        return None


def clear(paths: RunPaths, rank: int) -> None:
    """A resumed or requeued run starts without its earlier ending and heartbeat (and process 0 removes
    the earlier cause). Called before jax.distributed.initialize, a rendezvous: no peer's watchdog runs,
    and no rank records a cause it could remove, before every rank did this."""
    paths.ending(rank).unlink(missing_ok=True)
    paths.heartbeat(rank).unlink(missing_ok=True)
    if rank == 0:
        paths.cause.unlink(missing_ok=True)


def read(paths: RunPaths, since: float = 0.0) -> list[dict]:
    """Every rank's ending written at or after `since` (time.time()), earliest first."""
    found = []
    for path in paths.endings.glob("rank-*.json") if paths.endings.is_dir() else []:
        try:
            ending = json.loads(path.read_text())
        except (OSError, ValueError):  # removed or replaced while we looked
            continue
        if ending["at"] >= since:
            found.append(ending)
    return sorted(found, key=lambda e: e["at"])


def last_line(error: BaseException) -> str:
    """`Type: last line of the message`: JAX wraps a callback's error in pages of text, whose last
    line is the one that says what happened."""
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
        record(paths, rank, FAILED, f"rank {rank} failed: {last_line(error)}")
        if several_processes:
            atexit.register(_exit_now, EXIT_FAILED)
        raise


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def die_with_parent(parent_pid: int) -> None:
    """Never outlive the local launcher: the kernel kills this process when its parent dies
    (PR_SET_PDEATHSIG; Linux). SIGKILL, not a polite signal: with the launcher gone nobody reads
    our output, so there is nothing left to save for. The parent may have died before the call."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux: no prctl
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(EXIT_FAILED)
