"""`dali-launch train`: the task runs in this very process, its output also in logs/rank-0.log."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from dali_launch.launcher.backends.base import Backend, Outcome, refuse_node_range
from dali_launch.launcher.backends.job import RunState, cancel_requested
from dali_launch.launcher.backends.srun_step import refuse_one_of_several
from dali_launch.launcher.console import is_chatter
from dali_launch.launcher.route.machine_checks import check_gpu_count, check_gpus
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.observe import library_output
from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths


class Train(Backend):
    name = spec_name = "train"
    started_by = "dali-launch train"
    process_id = 0  # whose log the output also goes to (and who reports the result)

    def check(self, run: RunConfig) -> None:
        refuse_one_of_several()  # `srun dali-launch train` would train N times, each alone as "rank 0"
        refuse_node_range(run, "`train`")
        check_gpus(run)
        check_gpu_count(run)
        if run.nodes != 1 or run.tasks_per_node != 1 or run.launch.local:
            raise UsageError(
                "`train` runs one process here; for several use "
                "`dali-launch --local --nodes N --gpus-per-node G --processes P`"
            )

    def run(self, run: RunConfig, paths: RunPaths) -> Outcome:
        """Runs the task to its end; a task's error propagates as it would in any program. Ctrl-C reaches
        the task itself (it checkpoints and exits 130); a stop that `dali-launch cancel` asked for is a
        cancelled run, exit 0."""
        from dali_launch.trainer.task import run_task

        started = time.time()
        try:
            log = paths.log(self.process_id)
            with _also_to(log):  # `dali-launch logs RUN` reads a `train` run like a local one
                run_task(str(paths.root), str(log))
        except SystemExit:
            if not cancel_requested(paths, since=started):
                raise
            newest = saved.newest(paths)
            at = f"; checkpoint written at step {newest.step}" if newest else ""
            return Outcome(RunState.CANCELLED, f"cancelled (`dali-launch cancel`){at}; resume with {_resume(paths)}", 0)
        return Outcome(RunState.FINISHED, report=self.process_id == 0)


def _resume(paths: RunPaths) -> str:
    return TaskSpec.load(paths.root).how_to_resume()


@contextlib.contextmanager
def _also_to(log: Path):
    """Python's stdout and stderr also go to `log` (appended: a resumed run keeps what came before); what
    the libraries' own threads write goes there alone. A failed run keeps that after the task returns:
    Orbax's and TensorStore's threads, unwinding from a refused checkpoint write, printed 350 lines of
    tracebacks around and after the run's one line, until the process ended."""
    log.parent.mkdir(parents=True, exist_ok=True)
    library_output.route_library_voices()
    streams = sys.stdout, sys.stderr
    file = log.open("a", encoding="utf-8")
    sys.stdout, sys.stderr = (_Tee(stream, file) for stream in streams)
    try:
        yield
    except BaseException:
        sys.stdout, sys.stderr = streams[0], _Tee(streams[1], file, ours_to_log=False)  # until the process ends
        raise
    else:
        sys.stdout, sys.stderr = streams
        file.close()


class _Tee:
    """A stream that also writes to `file`; a library's chatter, and anything its own threads write, goes to
    `file` alone. `ours_to_log` False: our lines go to the stream alone (the run is over, its log done)."""

    def __init__(self, stream, file, ours_to_log: bool = True):
        self.stream, self.file, self.ours_to_log = stream, file, ours_to_log

    def write(self, text: str) -> int:
        ours = library_output.ours()
        if not self.file.closed and (self.ours_to_log or not ours):  # a handler made in the run may outlive it
            self.file.write(text)
        if not ours or is_chatter(text):  # a library's: in the log, not on the console
            return len(text)
        return self.stream.write(text)

    def flush(self) -> None:
        if not self.file.closed:
            self.file.flush()
        self.stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding...: the terminal's
        return getattr(self.stream, name)
