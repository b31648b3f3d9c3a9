"""What training's pipelines gave, kept for their next start: one sample of each output (its shape and dtype) and
an epoch's samples. expected.py foresees a built-in pipeline of two outputs; for any other (one's own, a task's
of more outputs) this record is the guess, so that its first device call compiles and its model initialises
while its pipelines are built, as a built-in's do (set_up.py), from its second start on.

Process 0 writes it once the first batch is read, in two places: the run directory (`batch_shapes.json`: a
requeue, a resume) and the run root's shared compile cache (`batches/KEY.json`: the next run there of the same
pipeline, settings, split and task). KEY names all of them; a record of another key is not taken. The first
batch confirms the guess, and a wrong one costs a compile, never a wrong program.

A record: {"key": KEY, "sample": {name: {"shape": [...], "dtype": str}}, "samples": N}. The launcher's pre-flight,
which defines (and may run) one's own pipeline before the job starts, may write the run directory's: without a
key (it does not know what the task's plan decides) it is taken; without "samples", the split's count is (facts).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from dali_launch.trainer.data.expected import Expected
from dali_launch.trainer.run_dir import RunPaths, write_atomic

SHARED = "batches"  # in the run root's shared compile cache


def key(data, split: str, outputs: tuple[str, ...]) -> str:
    """What the record is of: the [data] settings (the pipeline among them) and what the pipelines were decided to
    be built with (`data`: decided.DataPlan), the split and the outputs."""
    decided = {"decoder": data.decoder, "reader_threads": data.reader_threads, "output_dtype": data.output_dtype}
    what = {"data": dataclasses.asdict(data.settings), "decided": decided | {"decoded_cache_mb": data.cache_mb}}
    what |= {"split": str(Path(split).absolute()), "outputs": list(outputs)}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:32]


def places(run_dir: str, shared: Path | None, name: str) -> list[Path]:
    """Where record `name` (a key) is kept: the run directory's, then the shared compile cache's (None: off)."""
    found = [RunPaths(run_dir).batch_shapes]
    return found + ([shared / SHARED / f"{name}.json"] if shared is not None else [])


def read(paths: list[Path], name: str) -> dict | None:
    """The first record of key `name` (or of none, the pre-flight's) in `paths`, or None."""
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("sample"), dict) and record.get("key") in (name, None):
            return record
    return None


def write(paths: list[Path], name: str, sample: dict, samples: int) -> None:
    """The record kept in `paths` (process 0's), where it is not there already."""
    record = {"key": name, "sample": sample, "samples": samples}
    text = json.dumps(record, indent=1)
    for path in paths:
        try:
            if not path.is_file() or json.loads(path.read_text()) != record:
                write_atomic(path, text)
        except (OSError, ValueError):  # a record is a hint: a cache folder that refuses it costs a compile later
            continue


def expected(record: dict | None, outputs: tuple[str, ...], calls_per_epoch, samples: int | None) -> Expected | None:
    """The guess a record makes (expected.py's Expected) for a task of `outputs`: its samples, or the split's
    `samples` where it has none, in device calls (`calls_per_epoch(samples)`); None for no record or a record
    that does not fit."""
    if record is None or set(record["sample"]) != set(outputs):
        return None
    try:
        sample = {name: _one(record["sample"][name]) for name in outputs}
    except (KeyError, TypeError, ValueError):
        return None
    count = record.get("samples") or samples
    return Expected(sample, calls_per_epoch(int(count))) if count else None


def _one(output: dict) -> dict:
    """One output's record, checked: a shape of whole numbers, a dtype numpy knows."""
    import numpy as np

    shape = [int(n) for n in output["shape"]]
    if any(n < 0 for n in shape):
        raise ValueError(shape)
    return {"shape": shape, "dtype": np.dtype(output["dtype"]).name}
