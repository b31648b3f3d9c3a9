"""What the libraries' own threads print goes to the run's logs alone, never the console.

A checkpoint write the file system refused (full, read-only) ended in the run's one line, but under
350 lines (`train`) or 378 (`--local`) of Orbax's and TensorStore's tracebacks and absl errors, printed
from their own threads (and from TensorStore's C++ threads as the process ended). Python writes in the
thread that speaks, so the rule is by thread: the task's main thread and ours (named `dali-launch-*`)
are the run's voice; any other thread's text is kept in the log. So is what a library says through `logging`
or Python's unraisable-exception hook from any thread, the main one too (our code never logs: asyncio's
"exception never retrieved" and Orbax's absl errors can come from the main thread as their objects are
collected at a failed checkpoint's end, and once reached the console that way). `train` applies it itself
(launcher/backends/this_process.py); a `--local` rank or a submitted SLURM task tags such lines with `MARK` (and
the traceback it ends with); its launcher keeps them out of the console, and `dali-launch logs` shows them untagged.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback

MARK = "\x1f"  # ASCII unit separator: never in a line of ours
OUR_THREADS = "dali-launch"


class _Speaker(threading.local):
    library = False  # this thread is inside a logging handler or the unraisable hook


_speaker = _Speaker()


def ours() -> bool:
    """Written by the task's own code: its main thread, or a thread of ours, unless a library speaks
    through it (`route_library_voices`)."""
    thread = threading.current_thread()
    return not _speaker.library and (thread is threading.main_thread() or thread.name.startswith(OUR_THREADS))


def _as_library(speak):
    def spoken(*args):
        before, _speaker.library = _speaker.library, True
        try:
            return speak(*args)
        finally:
            _speaker.library = before

    spoken.as_library = True
    return spoken


def route_library_voices() -> None:
    """Every logging handler's output and every unraisable exception's report count as a library's, in
    whichever thread they are written. Once a process (the patch is checked for)."""
    if not getattr(logging.Handler.handle, "as_library", False):
        logging.Handler.handle = _as_library(logging.Handler.handle)
    if not getattr(sys.unraisablehook, "as_library", False):
        sys.unraisablehook = _as_library(sys.unraisablehook)


def is_tagged(line: str) -> bool:
    return line.startswith(MARK)


def untagged(text: str) -> str:
    return text.replace(MARK, "")


def tagged(text: str) -> str:
    """Every (part of a) line of `text` marked as a library's, blank lines too (print's lone "\n" among them)."""
    parts = text.split("\n")
    return "\n".join(MARK + part if part or k < len(parts) - 1 else part for k, part in enumerate(parts))


class Tagging:
    """A stream whose writes from other threads than ours are `tagged`, and that writes each thread's text in
    whole lines, one write each: print writes its text and its newline apart, and another thread's write
    between them (a library's tagged line, a piece of gloo's) made one line of two, which the launcher
    could neither show nor hide rightly (launcher/console.py). A thread's unfinished line waits for its
    newline, or for that thread's flush."""

    def __init__(self, stream):
        self.stream, self._unfinished = stream, threading.local()

    def write(self, text: str) -> int:
        unfinished = getattr(self._unfinished, "text", "")
        if not ours():
            text = tagged(text)
            text = text[len(MARK) :] if unfinished and text.startswith(MARK) else text  # the line is marked already
        whole, newline, self._unfinished.text = (unfinished + text).rpartition("\n")
        if newline:
            self.stream.write(whole + newline)
        return len(text)

    def flush(self) -> None:
        if unfinished := getattr(self._unfinished, "text", ""):
            self._unfinished.text = ""
            self.stream.write(unfinished)
        self.stream.flush()

    def __getattr__(self, name):  # flush, fileno, isatty, encoding...: the stream's
        return getattr(self.stream, name)


def tag_library_output() -> None:
    """A `--local` rank or a submitted SLURM task: its library threads' lines tagged for its launcher, and the
    traceback of an error that ends it: the launcher names the first failure in one line, from the
    culprit's log with its traceback where the error was not one of ours, and a peer's traceback (it only
    reacted: a collective whose partner was gone) printed between was noise."""
    route_library_voices()
    sys.stdout, sys.stderr = Tagging(sys.stdout), Tagging(sys.stderr)
    sys.excepthook = _logged


def _logged(kind, error, trace) -> None:
    sys.stderr.write(tagged("".join(traceback.format_exception(kind, error, trace))))
