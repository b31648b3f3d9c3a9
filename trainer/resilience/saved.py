"""A run directory's checkpoints as files, read without JAX or Orbax: the launcher and every task agree.

Orbax writes each checkpoint as `checkpoints/STEP/` with the items `state`, `tally` and `meta` (meta is
plain JSON: the epoch, device calls done, every process's DALI states, the order's record, the
--decoded-cache kind its DALI graph had, the names of the training-metric sums in `tally`). A step
is complete once Orbax committed it (`commit_success.txt`; an unfinished one is `STEP.orbax-checkpoint-tmp-*`
and never a bare number). `--resume`, `status`, `runs` and the tasks all find the newest one here.

Complete is not whole: a file truncated or removed later (a full disk, a careless copy) made `--resume`
fail with Orbax's and TensorStore's internals (once literally `Exception: })>.`). So each checkpoint
also holds FILES, every file's size and CRC32, written into it as part of its commit (checkpoint.py's
`RecordedCommit`: before Orbax's commit marker and rename, so no committed checkpoint lacks it, the
newest of a killed run included; Orbax's own commit bookkeeping, written after it, is left out);
`newest_whole` checks
the newest against it before anything loads it and goes back to the newest whole one, renaming each
damaged one STEP.damaged (kept for a look, never deleted; Orbax sees no step in that name).

A committed checkpoint without FILES has lost it (a careless copy), unless an earlier version wrote it,
before checkpoints carried records: that one is checked only for its metadata. Its own metadata tells
(RECORDED: every checkpoint since says it carries a record), and so do the run's older checkpoints (one
with a record means the versions since wrote them: a later one without it is damaged).
"""

from __future__ import annotations

import json
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.run_dir import RunPaths, parse_json, read_json, write_atomic

COMMITTED = "commit_success.txt"
TMP = ".orbax-checkpoint-tmp"  # Orbax's suffix of a step folder until its commit renames it
FILES = "dali_launch_files.json"  # {"files": {relative path: [size, crc32]}}
UNRECORDED = {FILES, COMMITTED, "_CHECKPOINT_METADATA"}  # Orbax writes the last two after FILES
RECORDED = "file_record"  # in meta: FILES's name, so a checkpoint that lost its record cannot pass as older
CHUNK = 1 << 22


@dataclass(frozen=True)
class Saved:
    """A complete checkpoint's small part: where it is in training, and who wrote it."""

    step: int
    path: Path
    epoch: int
    calls_done: int  # device calls done in `epoch` (the job's size when it was written)
    dali: tuple[tuple[str, ...], ...]  # per process that wrote it: its pipelines' states, base64
    order: dict | None  # --sample-order global: the position in the epoch's order (checkpoint.order_record)
    shards: dict | None = None  # shard order: the layout read and the shard of every state (checkpoint.shard_record)
    decoded_cache: str = "off"  # --decoded-cache's kind when written (plan/data.py): its DALI graph's
    metrics: tuple[str, ...] | None = None  # the training-metric sums its tally holds; None: an earlier version's

    @property
    def processes(self) -> int:
        """How many processes wrote it."""
        return len(self.dali)

    @property
    def record(self) -> dict | None:
        """What continues it on another topology (either order's record); None: a shard-order checkpoint
        written before shard order could (it continues only on its own processes)."""
        return self.order or self.shards

    def states_by_shard(self) -> dict[int, str]:
        """Every pipeline's DALI state (base64), by its shard id: a shard-order record says whose each is."""
        ids = self.shards["shard_ids"]
        return {shard: state for sids, states in zip(ids, self.dali) for shard, state in zip(sids, states, strict=True)}


def complete_steps(paths: RunPaths) -> list[int]:
    """The steps of every complete checkpoint, oldest first."""
    folder = paths.checkpoints
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit() and (p / COMMITTED).is_file())


def drop_unfinished(paths: RunPaths, step: int | None = None) -> None:
    """The half-written checkpoint folders (STEP.orbax-checkpoint-tmp-*: of `step`, else all) removed. Only
    where no process writes them any more: a refused write's other threads, or another rank's, may still
    add to its folder (the space its removal frees lets them), so the launcher sweeps again once the
    failed job's processes are gone."""
    if paths.checkpoints.is_dir():
        for tmp in paths.checkpoints.glob(f"{'*' if step is None else step}{TMP}*"):
            shutil.rmtree(tmp, ignore_errors=True)


def read(paths: RunPaths, step: int) -> Saved:
    """Checkpoint `step`'s small part; a ValueError where its metadata is missing or damaged (noted)."""
    path = paths.checkpoints / str(step)
    meta = read_json(path / "meta" / "metadata")
    if meta is None:
        raise ValueError(f"checkpoint {step} has no readable metadata")
    return Saved(
        step=step,
        path=path,
        epoch=meta["epoch"],
        calls_done=meta["calls_done"],
        dali=tuple(tuple(states) for states in meta["dali"]),
        order=meta.get("order"),
        shards=meta.get("shards"),
        decoded_cache=meta.get("decoded_cache", "off"),  # checkpoints from before it: no cache
        metrics=tuple(meta["metrics"]) if "metrics" in meta else None,  # before they were kept: none
    )


def newest(paths: RunPaths) -> Saved | None:
    """The newest complete checkpoint whose metadata reads, or None (its files not checked for damage:
    `status` and `runs` ask it)."""
    for step in reversed(complete_steps(paths)):
        try:
            return read(paths, step)
        except (ValueError, KeyError, TypeError):  # its metadata damaged: noted
            continue
    return None


def _crc(path: Path) -> int:
    crc = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def record_files(path: Path) -> None:
    """Writes FILES into the checkpoint folder `path` (process 0, every file written, about to be committed)."""
    files = {
        str(f.relative_to(path)): [f.stat().st_size, _crc(f)]
        for f in sorted(path.rglob("*"))
        if f.is_file() and str(f.relative_to(path)) not in UNRECORDED
    }
    write_atomic(path / FILES, json.dumps({"files": files}))


def damage(path: Path, crc: bool = True) -> str | None:
    """What is wrong with the complete checkpoint at `path`, or None: its files' sizes, and with `crc` their
    bytes. One written before FILES existed is checked only for its metadata; one that lost it is damaged."""
    if not path.is_dir():
        return "it is gone"
    meta, why = parse_json(path / "meta" / "metadata")
    if meta is None:
        return f"its metadata meta/metadata is {f'damaged ({why})' if why else 'missing'}"
    record, why = parse_json(path / FILES)
    if record is None and not why and _recorded(path, meta):
        return f"its file record {FILES} is missing"
    listed = (record or {}).get("files", {})
    if why or not isinstance(listed, dict) or not all(_an_entry(e) for e in listed.values()):
        return f"its file record {FILES} is damaged ({why or 'not a list of sizes and CRCs'})"
    for name, (size, crc32) in listed.items():
        f = path / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} is {f.stat().st_size:,} of its {size:,} bytes"
        if crc and _crc(f) != crc32:
            return f"{name} fails its CRC"
    return None


def _recorded(path: Path, meta: dict) -> bool:
    """Whether the checkpoint at `path` was written with a file record: its metadata says so, or an older
    checkpoint of the run has one (versions only move forward)."""
    if meta.get(RECORDED):
        return True
    step = int(path.name)
    return any(
        (older / FILES).is_file() for older in path.parent.iterdir() if older.name.isdigit() and int(older.name) < step
    )


def _an_entry(entry) -> bool:
    """A file's [size, crc32] as FILES lists it."""
    return isinstance(entry, list) and len(entry) == 2 and all(isinstance(n, int) for n in entry)


@dataclass(frozen=True)
class Damaged:
    step: int
    what: str
    kept_as: Path  # where it is now: STEP.damaged, or still STEP when not renamed

    def line(self, then: Saved | None) -> str:
        goes_on = f"resuming from step {then.step}" if then else "no whole checkpoint is left: starting afresh"
        return f"checkpoint step {self.step} is damaged ({self.what}); kept it as {self.kept_as}, {goes_on}"


def newest_whole(paths: RunPaths, rename: bool, crc: bool = True) -> tuple[Saved | None, list[Damaged]]:
    """The newest complete checkpoint that is whole, and the damaged ones newer than it, renamed to
    STEP.damaged when `rename` (one process does: the launcher at --resume, process 0 of a task; the
    others then check sizes alone, `crc` False: what is left after the rename is whole)."""
    damaged = []
    for step in reversed(complete_steps(paths)):
        path = paths.checkpoints / str(step)
        what = damage(path, crc)
        if what is None:
            try:
                return read(paths, step), damaged
            except (OSError, ValueError, KeyError, TypeError):
                what = "its metadata is unreadable"
        kept = _renamed(path) if rename and path.exists() else path
        damaged.append(Damaged(step, what, kept))
    return None, damaged


def _renamed(path: Path) -> Path:
    for n in range(100):
        target = path.with_name(f"{path.name}.damaged{f'-{n}' if n else ''}")
        if not target.exists():
            try:
                path.rename(target)
            except FileNotFoundError:  # another process was first: the same decision
                return target
            return target
    return path
