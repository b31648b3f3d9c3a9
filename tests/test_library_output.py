"""A rank's console carries the run's own lines; what its libraries say is tagged for the log alone
(trainer/observe/library_output.py), in whichever thread they say it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from dali_launch.trainer.observe.library_output import MARK

RANK = textwrap.dedent(
    """
    import gc, logging, threading
    from dali_launch.trainer.observe.library_output import tag_library_output

    tag_library_output()
    print("epoch 0: ours")
    # asyncio's handler as a never-retrieved future is collected in the main thread, at a failed save's end
    logging.getLogger("asyncio").error("Future exception was never retrieved\\nfuture: RuntimeError('Event loop is closed')")

    class Closing:
        def __del__(self):
            raise RuntimeError("Event loop is closed")

    Closing()
    gc.collect()
    thread = threading.Thread(target=print, args=("a library's thread",), name="tensorstore")
    thread.start()
    thread.join()
    print("epoch 1: ours")
    """
)


def test_a_librarys_logging_and_unraisable_errors_in_the_main_thread_are_tagged_as_its_threads_lines_are():
    rank = subprocess.run([sys.executable, "-c", RANK], capture_output=True, text=True, timeout=60)
    assert rank.returncode == 0, rank.stderr
    lines = (rank.stdout + rank.stderr).splitlines()
    untagged = [line for line in lines if not line.startswith(MARK)]
    assert untagged == ["epoch 0: ours", "epoch 1: ours"], lines
    said = "\n".join(lines)
    for library in ("Future exception was never retrieved", "Exception ignored in", "a library's thread"):
        assert library in said, said


CUT = textwrap.dedent(
    """
    import sys, threading
    from dali_launch.trainer.observe.library_output import tag_library_output

    tag_library_output()
    sys.stdout.write("epoch 0: ours")  # print's text, its newline to come as a write of its own
    thread = threading.Thread(target=print, args=("a library's thread",), name="tensorstore")
    thread.start()
    thread.join()
    sys.stdout.write("\\n")
    print("epoch 1: ours", flush=True)
    """
)


def test_a_threads_line_is_written_whole_though_another_thread_writes_between_its_parts():
    """The main thread's text, then a library thread's whole line, then the main thread's newline, in that
    order: the pipe gets two whole lines, the library's tagged, where it got one line of both (which the
    launcher showed, the library's text and all)."""
    rank = subprocess.run([sys.executable, "-u", "-c", CUT], capture_output=True, text=True, timeout=60)
    assert rank.returncode == 0, rank.stderr
    assert rank.stdout.splitlines() == [f"{MARK}a library's thread", "epoch 0: ours", "epoch 1: ours"], rank.stdout
