"""benchmarks/scale.py's reading of what fs_probe/sitecustomize.py wrote: one JSON file per process of a run,
with its file-system operations (time, operation, path) and the trainer's timed phases."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path


def processes(probe: Path) -> tuple[dict[int, dict], list[dict]]:
    """(rank -> its probe file, the launcher processes' files). A rank is a process that timed trainer
    phases; DALI's spawned workers (none here) and SLURM's own processes are neither."""
    docs = [json.loads(p.read_text()) for p in sorted(probe.glob("process-*.json"))]
    ranks = {int(d["rank"]): d for d in docs if d["rank"] is not None and any(m[0] == "phase" for m in d["marks"])}
    launchers = [d for d in docs if d["rank"] is None and d["argv"] and d["argv"][0].endswith("cli.py")]
    return ranks, launchers


def windows(doc: dict, what: str) -> list[tuple[float, float, object]]:
    return [(start, end, detail) for kind, start, end, detail in doc["marks"] if kind == what]


def within(events: list, spans: list) -> list:
    return [e for e in events if any(start <= e[0] <= end for start, end, *_ in spans)]


def category(path: str, run_dir: Path) -> str:
    """The run directory's entry a path is in (heartbeats, endings, checkpoints, ...), or `data`; a file written
    through a temporary one of its own (run_dir.write_atomic: `.NAME.RANDOM.tmp`) is NAME's."""
    try:
        entry = Path(path).relative_to(run_dir).parts[0]
    except (ValueError, IndexError):
        return "data"
    if entry.startswith(".") and entry.endswith(".tmp"):
        return entry[1:].removesuffix(".tmp").rsplit(".", 1)[0]
    return entry


def first_step(doc: dict) -> float | None:
    """When the rank's first SGD step was done (its Startup mark)."""
    return next((end for kind, _, end, detail in doc["marks"] if kind == "phase" and detail == "first step"), None)


def steady_spans(doc: dict) -> list[tuple[float, float, dict]]:
    """The rank's training after its first step: every epoch's steps (epoch 0 from its first step on,
    one call less), never its evaluations or epoch-end checkpoints, which run between epochs."""
    done = first_step(doc)
    spans = []
    for start, end, detail in windows(doc, "epoch"):
        if start <= done <= end:
            start, detail = done, {**detail, "calls": detail["calls"] - 1}
        spans.append((start, end, detail))
    return spans


def periodic(event) -> bool:
    """One of the watchdog's periodic operations (resilience/watchdog.py): touching its heartbeat, reading
    a peer's, opening the job's cause. They come every 2 s from its thread, so their count in any stretch
    of time is its length times their rate, whatever the stretch holds (start-up, steps, a checkpoint)."""
    _, operation, path = event
    beat = operation in ("os.utime", "os.stat") and "/heartbeats/" in path
    return beat or (operation == "open" and path.endswith("/endings/cause.json"))


def watchdog(event) -> bool:
    """Any operation of the watchdog's thread: its periodic ones, and its reads of a peer's heartbeat text
    (who the peer is, once per peer) and of a quiet peer's ending. The first read comes at the watchdog's
    first look, a beat after the task started: among the first steps when the start-up took less (a warm
    compile cache: the first step 1.3 s in). Counted as a step's, it failed the scale smoke test in the
    full suite only, whose compile cache earlier tests had filled. A rank's own heartbeat and ending are
    written through temporary files (`.rank-0.*.tmp`): those are its own, not the watchdog's."""
    _, operation, path = event
    name = os.path.basename(path)
    read = operation == "open" and name.startswith("rank-") and not name.endswith(".fault")
    return periodic(event) or (read and ("/heartbeats/" in path or "/endings/" in path))


def polling(event) -> bool:
    """A rank's read of coordinator.json, every 0.1 s until process 0 has written it (rendezvous.py): how many
    there are says how long process 0 took to get there (14 seen on two busy cores, 1 on idle ones), not how
    many files a rank's start-up touches, so `startup_ops` counts them apart."""
    return event[1] == "open" and event[2].endswith("/coordinator.json")


def watchdog_rate(doc: dict) -> float | None:
    """The watchdog's periodic operations a second over whole intervals: from the rank's first touch of its
    own heartbeat (an interval's first operation) to its last, the last interval's operations left out. A
    stretch that ends mid-interval would count that interval's operations in a fraction of its time and
    measure the quantization, not the rate (9 operations in 4.1 s is 2.2/s, of a rate of 1.5)."""
    touches = [e[0] for e in doc["events"] if e[1] == "os.utime" and "/heartbeats/" in e[2]]
    if len(touches) < 2:
        return None
    first, last = touches[0], touches[-1]
    return sum(1 for e in doc["events"] if periodic(e) and first <= e[0] < last) / (last - first)


# Written beside the steps, not by them (see per_rank); progress.json by process 0's thread of its own (at a
# start-up phase, an epoch's start and end, at most every 5 s while the steps run: trainer/observe/progress.py).
BACKGROUND = ("checkpoints", "compile-cache", "data", "progress.json")


STEP_EVENTS = 10  # a rank's operations counted as its steps' that a row names, so that a count names its cause


def _named(event, since: float, run_dir: Path) -> list:
    """An operation as a row shows it: seconds after the rank's first step, the operation, the path in the run."""
    at, operation, path = event
    inside = Path(path).is_relative_to(run_dir)
    return [round(at - since, 3), operation, str(Path(path).relative_to(run_dir)) if inside else path]


def per_rank(doc: dict, run_dir: Path) -> dict:
    """One rank's counts: its steady training, before its first step, per checkpoint and evaluation;
    the watchdog's periodic operations apart (`watchdog`), as a rate. Checkpoints are written in the
    background (Orbax's asynchronous saves) and the compile cache filled during epoch 0 (the evaluation
    compiled ahead; the run root's cache outside the run directory): their operations land among the
    steps but are not the steps', so `step_ops` leaves them out and `background_ops_per_s` counts them."""
    epochs = windows(doc, "epoch")
    steady = steady_spans(doc)
    saves, evals = windows(doc, "save"), windows(doc, "evaluate")
    seconds = sum(end - start for start, end, _ in steady)
    calls = sum(detail["calls"] for _, _, detail in steady)
    trained = within(doc["events"], steady)
    own = [e for e in doc["events"] if not watchdog(e)]  # what the rank does besides its watchdog
    stepping = within(own, steady)
    behind = [e for e in stepping if category(e[2], run_dir) in BACKGROUND]
    steps = [e for e in stepping if category(e[2], run_dir) not in BACKGROUND]
    first = min((start for start, _, _ in epochs), default=float("inf"))
    return {
        "steady_s": seconds,
        "steady_calls": calls,
        "steady_ops": len(trained),
        "ops_per_step": len(trained) / calls if calls else None,
        "ops_per_s": len(trained) / seconds if seconds else None,
        "step_ops": len(steps) / calls if calls else None,
        "step_events": [_named(e, first_step(doc), run_dir) for e in steps[:STEP_EVENTS]],
        "background_ops_per_s": len(behind) / seconds if seconds else None,
        "watchdog_ops_per_s": watchdog_rate(doc),
        "startup_ops": sum(1 for e in own if e[0] < first and not polling(e)),
        "startup_polls": sum(1 for e in own if e[0] < first and polling(e)),
        "startup_watchdog_ops": sum(1 for e in doc["events"] if e[0] < first and watchdog(e)),
        "save_ops": len(within(own, saves)) / len(saves) if saves else None,
        "save_s": [end - start for start, end, _ in saves],
        "eval_ops": len(within(own, evals)) / len(evals) if evals else None,
    }


def analyse(probe: Path, run_dir: Path, launched: float | None, n: int) -> dict:
    """What scale.py's table shows of one steady run (see its docstring), and the detail behind it."""
    ranks, launchers = processes(probe)
    if sorted(ranks) != list(range(n)):
        return {"failed": True, "error": f"probe files of ranks {sorted(ranks)} of {n}", "stderr_tail": []}
    counts = {r: per_rank(doc, run_dir) for r, doc in ranks.items()}
    zero, done = counts[0], first_step(ranks[0])
    saves = list(zip(*(c["save_s"] for c in counts.values())))  # per checkpoint, every rank's time
    steady = steady_spans(ranks[0])
    launcher_ops = sum(len(within(d["events"], steady)) for d in launchers)
    files = collections.Counter(
        (e[1], category(e[2], run_dir)) for doc in ranks.values() for e in within(doc["events"], steady_spans(doc))
    )
    others = [c for r, c in counts.items() if r != 0] or [zero]
    return {
        "first_step_s": done - launched if done and launched else None,
        "step_ms": 1000 * zero["steady_s"] / zero["steady_calls"] if zero["steady_calls"] else None,
        "ops_per_rank_step": max(c["ops_per_step"] or 0 for c in counts.values()),
        "ops_per_rank_s": max(c["ops_per_s"] or 0 for c in counts.values()),
        "ops_rank0_s": zero["ops_per_s"],
        "step_ops_rank": max(c["step_ops"] or 0 for c in counts.values()),
        "step_events": {str(r): c["step_events"] for r, c in counts.items() if c["step_events"]},
        "background_ops_rank_s": max(c["background_ops_per_s"] or 0 for c in counts.values()),
        "watchdog_ops_rank_s": max(c["watchdog_ops_per_s"] or 0 for c in counts.values()),
        "startup_watchdog_ops_rank": max(c["startup_watchdog_ops"] for c in counts.values()),
        "startup_ops_rank0": zero["startup_ops"],
        "startup_ops_rank": max(c["startup_ops"] for c in others),
        "save_ops_rank": max(c["save_ops"] or 0 for c in counts.values()),
        "save_s": sum(max(times) for times in saves) / len(saves) if saves else None,
        "launcher_ops_s": launcher_ops / zero["steady_s"] if zero["steady_s"] else None,
        "steady_ops_by_file_per_rank_s": {
            f"{op} {where}": count / n / zero["steady_s"] for (op, where), count in sorted(files.items())
        },
        "per_rank": {str(r): {k: v for k, v in c.items() if k != "save_s"} for r, c in counts.items()},
    }


def pss_mb(pid: int) -> float:
    """A live process's proportional set size, MiB: its own pages and its share of the shared ones (the
    ranks share JAX's and DALI's libraries, which RSS would count once per rank); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Pss:")) / 1024
    except (FileNotFoundError, StopIteration, PermissionError):
        return 0.0
