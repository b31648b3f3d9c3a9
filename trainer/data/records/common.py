"""What every record source offers (records/<format>.py): a length, a key per sample, random access;
and what the sharded formats share: their shard files, read at an offset (which files: formats.py)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class RecordSource(Protocol):
    """Samples 0..len-1 in the order DALI's native reader for the format numbers them.

    Sources are pickled into DALI's worker processes (parallel external sources): open files and
    databases lazily, in the process that reads.
    """

    def __len__(self) -> int: ...

    def keys(self) -> list[bytes]:
        """One identifying key per sample, in order (the data set's fingerprint is made of them)."""
        ...

    def read(self, index: int) -> tuple[np.ndarray, int | np.ndarray]:
        """Sample `index`: its encoded bytes (uint8, 1-D) and its class id (or, where the source's
        `encoded_second` is true, its mask's encoded bytes)."""
        ...


def read_bytes(path: str, offset: int, size: int) -> np.ndarray:
    """`size` bytes of a file from `offset` (one open per read: sources are pickled, handles are not)."""
    return np.fromfile(path, np.uint8, count=size, offset=offset)


def as_list(value) -> list[str]:
    """A reader's path argument, one file or several, as a list."""
    return [value] if isinstance(value, str) else list(value)
