"""The one exception every bad input becomes: the CLI prints its message as one line, exits 2; and what an
exception of the user's own code says, in one line, for the messages that name it."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path


class UsageError(Exception):
    """Bad input, found before any job is submitted or device taken; the message says the fix."""


def said(e: BaseException, limit: int = 300) -> str:
    """`Type: the first line of its message` (or the type alone), at most `limit` characters of it."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:limit]}" if text else type(e).__name__


def where(e: BaseException) -> str:
    """`file.py line N`: the deepest frame of `e`'s traceback in the user's own code; "" when none is."""
    return own_line([(frame.filename, frame.lineno) for frame in traceback.extract_tb(e.__traceback__)])


def own_line(frames: list[tuple[str, int]]) -> str:
    """`file.py line N` of the last of `frames` (file name, line) in the user's own code -- not the standard
    library's, an installed package's or ours; "" when none is."""
    root = Path(__file__).resolve().parents[1]
    skipped = ("<", *(f"{root / half}/" for half in ("trainer", "launcher")), *_libraries())
    own = [(name, line) for name, line in frames if not name.startswith(skipped) and "site-packages" not in name]
    return f"{Path(own[-1][0]).name} line {own[-1][1]}" if own else ""


def _libraries() -> tuple[str, ...]:
    return tuple({f"{Path(p).resolve()}/" for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
