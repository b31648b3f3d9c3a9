"""What the launcher prints: a closed console (`dali-launch ... | head`) is no failure of the job."""

from __future__ import annotations

import os
import sys


def echo(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader left; the job goes on, and so do its logs
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def error(text: str) -> None:
    print(f"dali-launch: {text}", file=sys.stderr, flush=True)
