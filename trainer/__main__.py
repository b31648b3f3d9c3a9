"""`python -m dali_launch.trainer RUN_DIR`: one task of a run, as local mode starts it."""

import os
import socket
import sys

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.observe.library_output import tag_library_output
from dali_launch.trainer.resilience.ending import die_with_parent, leave
from dali_launch.trainer.resilience.watchdog import announce
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import LAUNCHED_AT, LAUNCHER_PID, LOCAL_ENV

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dali_launch.trainer RUN_DIR")
    if LAUNCHER_PID in os.environ:  # local mode: our launcher reads what we print
        die_with_parent(int(os.environ[LAUNCHER_PID]))
        tag_library_output()
        # Alive from the first instant, before the task's imports (a third of a second or more): a rank
        # stopped in them is named within --watchdog-s (resilience/watchdog.py)
        rank = int(os.environ[LOCAL_ENV["process_id"]])
        announce(RunPaths(sys.argv[1]), rank, socket.gethostname(), os.environ[LAUNCHED_AT])
    from dali_launch.trainer.task import run_task  # the heavy imports, after it

    try:
        run_task(sys.argv[1])
    except UsageError as e:
        sys.exit(f"dali-launch: error: {e}")
    leave(0)  # the work is done: no interpreter teardown of XLA's and DALI's state
