"""One class names every file of a run directory; the launcher and every task use it alike.

Its JSON files are read through `read_json` and `read_jsonl` alone: a file cut short (a disk that filled
during an append) or garbled is read as missing, or without its bad lines, and noted (`take_notes`), so
that `status`, `runs` and `--resume` say which file and go on with the rest instead of a traceback."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

from dali_launch.trainer.tasks.contract import DIRECTIONS, better_of


class RunPaths:
    """A run directory: written once by the launcher, then appended to by the tasks.

    config.json       the resolved TaskSpec (what every task reads)
    config.toml       the resolved flags and --config file, as a --config file that repeats the run
    launch.json       the launcher's own settings (nodes, SLURM knobs)
    job.json          a submitted run's SLURM job: its id and submitit's folder (launcher/backends/job.py writes it)
    cancel.json       `dali-launch cancel` asked the run to stop (when); the run ends `cancelled`; a resume clears it
    requeues.jsonl    one line per requeue of the run's SLURM job (when, which start, why); a resume clears it
    manifest.json     what ran: config, package versions, git revision, topology, SLURM facts, environment
    rank_map.json     host, process, local devices and DALI shard ids of every process
    metrics.jsonl     one JSON object per epoch, from process 0
    progress.json     what process 0 is doing now: its start-up phase, or its epoch and step (observe/progress.py)
    result.json       the final summary, from process 0
    logs/rank-N.log   each process's output (local mode; SLURM keeps its own through submitit)
    ranks/rank-N.json what each process reports of itself (merged into rank_map.json)
    samples/          --record-samples fingerprints, epoch-E-rank-N-from-CALL.npy
    checkpoints/      Orbax steps: train state, epoch tally, epoch and DALI reader positions (or the global order's)
    elastic.jsonl     one line per resume on another device count: the batch rule applied (--sample-order global)
    bad_samples.jsonl the samples --bad-samples skip leaves out, one line each (split, sample, what is wrong)
    init_from.json    --init-from: the checkpoint and which variables were loaded, re-initialised, ignored
    objects/          NAME.pkl: a model, pipeline or task the Python API sent by value (defined in a notebook or
                      __main__), cloudpickled; the run's settings name it `<run>:NAME` (trainer/entry_points.py: Sent)
    follower.log      what the Python API's follower process printed: the launcher's console of a run it started
                      here or --local (launcher/backends/detached.py)
    listings/         a split's records as process 0 listed them, read by the other ranks (records/shared.py)
    heartbeats/       rank-N, touched every few seconds by each live process (the watchdog reads them)
    endings/          rank-N.json: how a rank ended (done, failed, stopped, or its watchdog's verdict on a peer);
                      cause.json: the job's first failure or verdict (what watchdogs and launchers poll)
                      rank-N.fault: the stacks of a rank a fatal signal ended (SIGSEGV, SIGABRT)
    step.json         the SLURM job step whose tasks run here (`srun dali-launch task`), once the directory is made
    coordinator.json  where process 0's coordinator listens in this start of the job (rendezvous.py)
    locks/            launcher.lock, task.lock: held (flock) while a launcher or a task's process 0 runs here
    tensorboard/      TensorBoard event files (process 0); rank-N/plugins/profile/: --profile-steps traces
    wandb.json        the W&B run id, so a requeued or resumed run continues the same W&B run
    wandb/            W&B's own files (offline runs: `wandb sync RUN_DIR/wandb/offline-run-*`)
    compile-cache/    XLA's compiled programs of this run, shared through RUN_ROOT/.compile-cache (compile_cache.py)
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    config = property(lambda self: self.root / "config.json")
    config_toml = property(lambda self: self.root / "config.toml")
    launch = property(lambda self: self.root / "launch.json")
    job = property(lambda self: self.root / "job.json")
    cancel = property(lambda self: self.root / "cancel.json")
    requeues = property(lambda self: self.root / "requeues.jsonl")
    manifest = property(lambda self: self.root / "manifest.json")
    rank_map = property(lambda self: self.root / "rank_map.json")
    metrics = property(lambda self: self.root / "metrics.jsonl")
    progress = property(lambda self: self.root / "progress.json")
    result = property(lambda self: self.root / "result.json")
    logs = property(lambda self: self.root / "logs")
    ranks = property(lambda self: self.root / "ranks")
    samples = property(lambda self: self.root / "samples")
    submitit = property(lambda self: self.root / "submitit")
    checkpoints = property(lambda self: self.root / "checkpoints")
    heartbeats = property(lambda self: self.root / "heartbeats")
    endings = property(lambda self: self.root / "endings")
    cause = property(lambda self: self.root / "endings" / "cause.json")
    locks = property(lambda self: self.root / "locks")
    tensorboard = property(lambda self: self.root / "tensorboard")
    wandb_run = property(lambda self: self.root / "wandb.json")
    step = property(lambda self: self.root / "step.json")
    coordinator = property(lambda self: self.root / "coordinator.json")
    elastic = property(lambda self: self.root / "elastic.jsonl")
    compile_cache = property(lambda self: self.root / "compile-cache")
    bad_samples = property(lambda self: self.root / "bad_samples.jsonl")
    init_from = property(lambda self: self.root / "init_from.json")
    batch_shapes = property(lambda self: self.root / "batch_shapes.json")  # data/batch_record.py
    objects = property(lambda self: self.root / "objects")
    follower_log = property(lambda self: self.root / "follower.log")

    def sent(self, name: str) -> Path:
        """An object sent by value, `<run>:NAME` in the run's settings."""
        return self.objects / f"{name}.pkl"

    def log(self, rank: int) -> Path:
        return self.logs / f"rank-{rank}.log"

    def rank_report(self, rank: int) -> Path:
        return self.ranks / f"rank-{rank}.json"

    def listing(self, name: str) -> Path:
        return self.root / "listings" / name

    def heartbeat(self, rank: int) -> Path:
        return self.heartbeats / f"rank-{rank}"

    def ending(self, rank: int) -> Path:
        return self.endings / f"rank-{rank}.json"

    def fault(self, rank: int) -> Path:
        """Where a rank that a fatal signal ends leaves its stacks (ending.record_faults)."""
        return self.endings / f"rank-{rank}.fault"

    def lock(self, holder: str) -> Path:
        """`launcher` (local mode's launcher) or `task` (process 0 of the task, every backend)."""
        return self.locks / f"{holder}.lock"

    def profile(self, rank: int) -> Path:
        """The profiler's log dir for one rank: it writes plugins/profile/<time>/<host>.xplane.pb under it."""
        return self.tensorboard / f"rank-{rank}"

    def sample_record(self, epoch: int, rank: int, first_call: int) -> Path:
        return self.samples / f"epoch-{epoch}-rank-{rank}-from-{first_call}.npy"

    def sample_records(self, epoch: int) -> list[Path]:
        """Every rank's records of one epoch (a resumed epoch has several pieces per rank)."""
        return sorted(self.samples.glob(f"epoch-{epoch}-rank-*.npy"))


def write_atomic(path: Path, data: str | bytes) -> None:
    """Readers (the launcher's follow loop, other ranks) never see half a file. The temporary file's name
    is this writer's own: two processes writing the same path at once (the ranks of a host filling a shared
    cache) each rename a whole file, where one shared name let the second find the first's gone."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except FileNotFoundError:  # its folder comes with the first write: a shared file system is asked once
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# A run directory is locked while a job runs in it: an exclusive flock, which the kernel drops when
# the holder dies however it dies. Over NFS, Linux maps flock to byte-range locks that the server
# arbitrates across clients, but mounts with `nolock` or `local_lock=flock` keep them per host; the
# launcher therefore also asks SLURM whether a run's job is still queued (launcher/backends/slurm.py).
LOCK_WAIT_S = 2.0  # a `--resume` check holds the lock for a moment; a starting holder waits that out


def hold_lock(path: Path):
    """Takes `path`'s lock for as long as the returned file stays open; None if another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a")
    end = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > end:
                handle.close()
                return None
            time.sleep(0.1)


def is_locked(path: Path) -> bool:
    """Whether a live process holds `path`'s lock; writes nothing (a missing file is unlocked)."""
    try:
        handle = path.open("r")
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def headline(metrics: dict) -> tuple[str, float | None]:
    """An epoch's line of metrics.jsonl: the test value its task headlines (test_accuracy for classification;
    lines of earlier versions name none and hold it) and its value (None where the epoch was not evaluated)."""
    key = metrics.get("headline", "test_accuracy")
    value = metrics.get(key)
    return key.removeprefix("test_").replace("_", " "), value if isinstance(value, (int, float)) else None


def better(metrics: dict) -> str:
    """Which way an epoch line's headline improves, "higher" or "lower": as the line says (`better`), else (a
    line of an earlier version) by its name, as a task that does not say is read (tasks/contract.better_of)."""
    said = metrics.get("better")
    return said if said in DIRECTIONS else better_of(metrics.get("headline", "test_accuracy"))


def best(epochs: list[dict]) -> dict | None:
    """The epoch line whose headline value is the best by its direction (the last one's; the earliest of
    equals), or None where none was evaluated."""
    scored = [m for m in epochs if headline(m)[1] is not None]
    if not scored:
        return None
    sign = -1 if better(scored[-1]) == "lower" else 1
    return max(scored, key=lambda m: sign * headline(m)[1])


# --- reading: a damaged file is noted, never a traceback --------------------------------------------

_NOTES: dict[Path, str] = {}  # path -> what is wrong with it, in the order met; one note a file
_SAID: set[Path] = set()  # taken already: a file read again later in the same process is not said twice
_JSON_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def note(path: Path, what: str) -> None:
    """Records that `path` is damaged (`what`: how, and what was done instead) for the command to say."""
    if Path(path) not in _SAID:
        _NOTES.setdefault(Path(path), f"{path} {what}")


def take_notes(forget: bool = False) -> list[str]:
    """The damage noted since the last call, one line a file; cleared (`forget`: and what was said before,
    for a new command)."""
    notes = list(_NOTES.values())
    _SAID.update(_NOTES)
    _NOTES.clear()
    if forget:
        _SAID.clear()
    return notes


def read_json(path: Path, default=None, kind: type = dict):
    """The JSON value in `path`, or `default` where it is missing or damaged (cut short, not JSON, not a
    `kind`); damage is noted."""
    value, why = parse_json(path, kind)
    if why:
        note(path, f"is damaged ({why}); read as missing")
    return default if value is None else value


def parse_json(path: Path, kind: type = dict) -> tuple[object | None, str | None]:
    """(the JSON value in `path`, None); (None, None) where it is missing; (None, what is wrong) where it
    is damaged. Notes nothing: for a caller that says the damage its own way (a checkpoint's)."""
    try:
        raw = Path(path).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as e:  # EIO, EACCES, a folder where a file should be
        return None, f"unreadable: {e.strerror}"
    try:
        value = json.loads(raw)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        return None, _why(raw, e)
    if not isinstance(value, kind):
        held, wanted = _JSON_NAMES.get(type(value), "null"), _JSON_NAMES.get(kind, kind.__name__)
        return None, f"a JSON {held} where {'an' if wanted[0] in 'aeiou' else 'a'} {wanted} belongs"
    return value, None


def read_jsonl(path: Path) -> list[dict]:
    """The objects of `path`, one a line; a line cut short or garbled is left out, and noted."""
    try:
        raw = Path(path).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        note(path, f"cannot be read ({e.strerror}); read as missing")
        return []
    rows, bad = [], []
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(number)
    if bad == [len(lines)]:  # no newline after it: an append that did not finish
        note(path, f"has its last line (line {bad[0]}) cut short; left it out")
    elif bad:
        which = (
            f"line {bad[0]} is no JSON object"
            if len(bad) == 1
            else f"lines {', '.join(map(str, bad))} are no JSON objects"
        )
        note(path, f"is damaged ({which}); left {'it' if len(bad) == 1 else 'them'} out")
    return rows


def _why(raw: bytes, error: ValueError) -> str:
    if not raw.strip():
        return "empty"
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at byte {error.pos:,} of {len(raw):,}"
    return "not UTF-8 text"
