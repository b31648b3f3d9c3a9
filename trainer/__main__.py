"""`python -m dali_launch.trainer RUN_DIR`: one task of a run, as local mode starts it."""
import sys

from dali_launch.trainer.task import run_task

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dali_launch.trainer RUN_DIR")
    run_task(sys.argv[1])
