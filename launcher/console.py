"""What the launcher prints: a closed console (`dali-launch ... | head`) is no failure of the job, and
third-party chatter (gloo's connection lines, C++ libraries' glog lines, tensorboardX's NaN warnings) is
left to the rank logs, which keep everything, also where it came mixed into a line of ours (RankLines)."""

from __future__ import annotations

import os
import re
import sys

from dali_launch.trainer.observe.library_output import MARK

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


# gloo writes its connection line in pieces, one write(2) each (strace of a rank: "[Gloo] Rank ", "0",
# " is connected to ", "1", " peer ranks. ", "Expected number of connected peer ranks is : ", "1", "\n"),
# from its own thread, so another writer's whole line may fall between two of them.
GLOO_PIECES = tuple(
    re.compile(piece)
    for piece in (
        r"\[Gloo\] Rank ",
        r"\d+",
        r" is connected to ",
        r"\d+",
        r" peer ranks\. ",
        r"Expected number of connected peer ranks is : ",
        r"\d+",
    )
)
GLOO_START = "[Gloo] "


class RankLines:
    """The console's share of one rank stream, line by line: not a library's tagged lines, not chatter, and
    not gloo's line where another writer's whole line cut it in two. That line comes out as two, or three:
    gloo's first pieces followed by the other line ("[Gloo] Rank 0 is connected to epoch 0: loss ..."), then
    gloo's remaining pieces on a line of their own (or only its newline: an empty line). So each part of
    gloo's line is taken off, and where it stopped is remembered for the stream's next line (1 in 5 runs of
    2 ranks showed them on the console before). A cut line of ours that begins with digits, cut right after
    one of gloo's numbers, loses them to gloo's (none of a rank's lines begins so)."""

    def __init__(self):
        self.due = None  # the gloo piece a cut line's rest starts with (len(GLOO_PIECES): its newline), else None

    def console(self, line: str) -> list[str]:
        """The parts of `line` (one line of the stream, without its newline) that belong on the console."""
        if self.due is not None:
            end, due = _gloo(line, 0, self.due)
            if not end and _digits(self.due - 1):  # the digits taken for gloo's were the other line's
                end, due = _gloo(line, 0, self.due - 1)
            if end or (not line and self.due == len(GLOO_PIECES)):  # gloo's rest, up to its newline or a cut
                line, self.due = line[end:], (due if line[end:] else None)
                if not line:
                    return []
        start = line.find(GLOO_START)
        if start < 0:
            return _for_console(line)
        before = _for_console(line[:start]) if start else []
        end, due = _gloo(line, start, 0)
        if due == 0 or (due == len(GLOO_PIECES) and end == len(line)):  # another of its lines, or one whole
            return before
        # Another writer's line (a blank one too) came after gloo's first `due` pieces: gloo's rest comes later
        self.due = due
        return [*before, *_for_console(line[end:])] if end < len(line) else before


def _gloo(line: str, pos: int, piece: int) -> tuple[int, int]:
    """gloo's pieces from `piece` on, read at `pos` as far as they go: (where they end, the next piece due).
    Digits alone at a line's start, before more text, are another line's (a continuation needs its text)."""
    start, first = pos, piece
    while piece < len(GLOO_PIECES) and (found := GLOO_PIECES[piece].match(line, pos)):
        pos, piece = found.end(), piece + 1
    if piece == first + 1 and _digits(first) and pos < len(line):
        return start, first
    return pos, piece


def _digits(piece: int) -> bool:
    return 0 <= piece < len(GLOO_PIECES) and GLOO_PIECES[piece].pattern == r"\d+"


def _for_console(part: str) -> list[str]:
    """A blank line says nothing under a rank's prefix (and gloo's newline comes alone when its text was cut)."""
    return [] if not part.strip() or part.startswith(MARK) or is_chatter(part) else [part]


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
