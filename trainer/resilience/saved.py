"""A run directory's checkpoints as files, read without JAX or Orbax: the launcher and every task agree.

Orbax writes each checkpoint as `checkpoints/STEP/` with the items `state`, `tally` and `meta` (meta is
plain JSON: the epoch, device calls done, every process's DALI states, a global order's record, the
--decoded-cache kind its DALI graph had). A step
is complete once Orbax committed it (`commit_success.txt`; an unfinished one is `STEP.orbax-checkpoint-tmp-*`
and never a bare number). `--resume`, `status`, `runs` and the tasks all find the newest one here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.run_dir import RunPaths

COMMITTED = "commit_success.txt"


@dataclass(frozen=True)
class Saved:
    """A complete checkpoint's small part: where it is in training, and who wrote it."""

    step: int
    path: Path
    epoch: int
    calls_done: int  # device calls done in `epoch` (the job's size when it was written)
    dali: tuple[tuple[str, ...], ...]  # per process that wrote it: its pipelines' states, base64
    order: dict | None  # --sample-order global: the position in the epoch's order (checkpoint.order_record)
    decoded_cache: str = "off"  # --decoded-cache's kind when written (resolve.py): its DALI graph's

    @property
    def processes(self) -> int:
        """How many processes wrote it: a shard-order run continues only on as many."""
        return len(self.dali)


def complete_steps(paths: RunPaths) -> list[int]:
    """The steps of every complete checkpoint, oldest first."""
    folder = paths.checkpoints
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit() and (p / COMMITTED).is_file())


def read(paths: RunPaths, step: int) -> Saved:
    path = paths.checkpoints / str(step)
    meta = json.loads((path / "meta" / "metadata").read_text())
    return Saved(
        step=step,
        path=path,
        epoch=meta["epoch"],
        calls_done=meta["calls_done"],
        dali=tuple(tuple(states) for states in meta["dali"]),
        order=meta.get("order"),
        decoded_cache=meta.get("decoded_cache", "off"),  # checkpoints from before it: no cache
    )


def newest(paths: RunPaths) -> Saved | None:
    """The newest complete checkpoint, or None."""
    steps = complete_steps(paths)
    return read(paths, steps[-1]) if steps else None
