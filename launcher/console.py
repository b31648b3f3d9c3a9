"""What the launcher prints: a closed console (`dali-launch ... | head`) is no failure of the job, and
third-party chatter (gloo's connection lines, C++ libraries' glog lines, tensorboardX's NaN warnings) is
left to the rank logs, which keep everything."""

from __future__ import annotations

import os
import re
import sys

CHATTER = re.compile(
    r"(\[Gloo\] "  # gloo, once per collective's connection
    r"|[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]]+\] "  # glog's info and warnings (XLA, TensorFlow); errors stay
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|submitit (INFO|WARNING|ERROR) \(|(INFO|WARNING|ERROR):submitit:"  # its word on a task (the story is ours)
    r"|(Warning: )?NaN or Inf found in input tensor)"  # tensorboardX, for a diverged loss (--on-nan says it once)
)


def is_chatter(line: str | bytes) -> bool:
    """A line of someone else's library that the console does without (the logs keep it)."""
    return bool(CHATTER.match(line.decode(errors="replace") if isinstance(line, bytes) else line))


def echo(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader left; the job goes on, and so do its logs
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def error(text: str) -> None:
    print(f"dali-launch: {text}", file=sys.stderr, flush=True)


class Interrupted(KeyboardInterrupt):
    """A stop signal (Ctrl-C's SIGINT, SIGTERM) ended a command that cleaned up after itself: `line` says
    what it left; the command exits 128 + `signum`, as a process the signal ended would."""

    def __init__(self, signum: int, line: str):
        super().__init__(line)
        self.signum, self.line = signum, line
