"""Evidence that data parallelism is right: parameter checksums per replica, sample fingerprints per epoch."""

from __future__ import annotations

import hashlib
import io

import jax
import numpy as np
from jax.experimental import multihost_utils

from dali_launch.trainer.run_dir import RunPaths, write_atomic


def local_checksums(params) -> list[str]:
    """A SHA-256 of every local replica of a pytree (parameters, statistics, ...), in local device order."""
    leaves = jax.tree.leaves(params)
    digests = [hashlib.sha256() for _ in leaves[0].addressable_shards]
    for leaf in leaves:
        shards = sorted(leaf.addressable_shards, key=lambda s: (s.index[0].start or 0) if s.index else 0)
        for digest, shard in zip(digests, shards):
            digest.update(np.asarray(shard.data).tobytes())
    return [d.hexdigest() for d in digests]


def gathered_checksums(params, processes: int) -> list[str]:
    """Every replica's checksum from every process, in global device order (all processes call this)."""
    local = np.array([[int(h[i : i + 8], 16) for i in range(0, 64, 8)] for h in local_checksums(params)], np.uint32)
    everyone = np.asarray(multihost_utils.process_allgather(local, tiled=True)) if processes > 1 else local
    return ["".join(f"{w:08x}" for w in row) for row in everyone.reshape(-1, 8)]


def fingerprints(outputs: list[np.ndarray]) -> np.ndarray:
    """One uint64 per sample from every output's row of it (decoded pixels, labels...): equal samples, equal prints.
    Each row as JAX holds it (int64 as int32 without x64): a pipeline's own arrays print as its batches do."""
    out = np.empty(len(outputs[0]), np.uint64)
    outputs = [np.asarray(o, jax.dtypes.canonicalize_dtype(np.asarray(o).dtype)) for o in outputs]
    for i in range(len(out)):
        digest = hashlib.blake2b(digest_size=8)
        for output in outputs:
            digest.update(np.ascontiguousarray(output[i]).tobytes())
        out[i] = np.frombuffer(digest.digest(), np.uint64)[0]
    return out


class SampleRecorder:
    """--record-samples: the fingerprints of the real (unpadded) training samples this process saw."""

    def __init__(self, spec, data, epoch: int, first_call: int, process_index: int):
        self.spec, self.data, self.epoch, self.prints = spec, data, epoch, []
        self.first_call, self.process_index = first_call, process_index
        if process_index == 0:  # before any rank can save: that takes steps with process 0
            _forget_from(RunPaths(spec.run_dir), epoch, first_call)

    def add(self, step: int, batch: dict) -> None:
        """The rows of a call that the step counts (its `valid` mask), whatever the sample order."""
        flat = lambda x: x.reshape(-1, *x.shape[2:])
        real = flat(_local_rows(batch["valid"])) > 0
        self.prints.append(fingerprints([flat(_local_rows(batch[name]))[real] for name in self.data.names]))

    def save(self, next_call: int) -> None:
        """Writes what was seen since the last save: at checkpoints and at the epoch's end."""
        paths = RunPaths(self.spec.run_dir)
        paths.samples.mkdir(parents=True, exist_ok=True)
        record = np.concatenate(self.prints) if self.prints else np.zeros(0, np.uint64)
        out = io.BytesIO()  # whole or not at all: a rank killed mid-write leaves no cut record
        np.save(out, record)
        write_atomic(paths.sample_record(self.epoch, self.process_index, self.first_call), out.getvalue())
        self.prints, self.first_call = [], next_call


def _forget_from(paths: RunPaths, epoch: int, first_call: int) -> None:
    """Removes the records of calls from `first_call` of `epoch` on: a run killed after its last checkpoint (kill
    -9) may have saved some, which its resumption reads again; on fewer ranks, its own would not replace them all."""
    for path in paths.samples.glob("epoch-*-rank-*-from-*.npy") if paths.samples.is_dir() else ():
        parts = path.stem.split("-")  # epoch, E, rank, N, from, CALL
        if (int(parts[1]), int(parts[5])) >= (epoch, first_call):
            path.unlink(missing_ok=True)


def _local_rows(x: jax.Array) -> np.ndarray:
    """This process's rows of a device-sharded array, in local device order."""
    shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])
