"""Where process 0's scalars go: TensorBoard event files (tensorboardX), and W&B if asked.

Steps are global SGD steps. A resumed or requeued run writes only steps after its checkpoint's
(the loop starts there), and TensorBoard is told so: the new event file begins with `purge_step`
= checkpoint step + 1, so TensorBoard's reader drops anything an earlier incarnation wrote past the
checkpoint (a run killed between two checkpoints). The event files are never rewritten. W&B keeps
its run id in the run directory and resumes that run; it ignores steps below its last one, so an
overlap after a crash is dropped there too.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from concurrent.futures import ThreadPoolExecutor

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, read_json, write_atomic


def _summary_writer():
    """tensorboardX's SummaryWriter, imported without PyTorch: its writer imports torch wherever torch is
    installed (only to accept torch tensors, which we never log), 1.5-3 s of every start on a GPU node that
    has it. A torch already imported is left as it is."""
    if "torch" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # `import torch` raises ImportError: tensorboardX's own fallback
    try:
        from tensorboardX import SummaryWriter
    finally:
        del sys.modules["torch"]
    return SummaryWriter


class TensorBoard:
    def __init__(self, paths: RunPaths, first_step: int):
        SummaryWriter = _summary_writer()
        # A pid suffix: two incarnations starting within one second on one host would share a file name.
        self.writer = SummaryWriter(
            str(paths.tensorboard), purge_step=first_step or None, filename_suffix=f".{os.getpid()}"
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, spec: TaskSpec, paths: RunPaths):
        try:
            import wandb
        except ImportError:
            raise UsageError(
                f"--wandb-project {spec.observe.wandb_project} needs the wandb package where the task "
                f"runs; pip install 'dali-launch[wandb]'"
            ) from None
        # Written before the run starts: a requeue that comes before the first log still finds it. Damaged
        # (noted): another W&B run, rather than none.
        run_id = read_json(paths.wandb_run, {}).get("id")
        if not isinstance(run_id, str):
            run_id = secrets.token_hex(4)  # W&B's own ids: 8 lowercase letters and digits
            write_atomic(paths.wandb_run, json.dumps({"id": run_id}))
        mode = None if spec.observe.wandb_mode == "auto" else spec.observe.wandb_mode
        self.run = wandb.init(
            project=spec.observe.wandb_project,
            id=run_id,
            resume="allow",
            dir=str(paths.root),
            name=paths.root.name,
            config=json.loads(spec.to_json()),
            mode=mode,
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.run.finish()


class Trackers:
    """Every tracker the run asked for, on process 0; none elsewhere (their calls do nothing).

    They write on a thread of their own: at a sync point the devices wait for the host, and
    building 5 TensorBoard summaries costs the host ~0.25 ms, which on GPUs is several fused steps.
    """

    def __init__(self, trackers: list | None = None):
        self.trackers = trackers or []
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="trackers") if self.trackers else None
        self.pending = []  # writes since the last flush, whose errors `flush` raises

    @classmethod
    def open(cls, spec: TaskSpec, paths: RunPaths, first_step: int) -> Trackers:
        """`first_step`: the global SGD step the run resumes after (0 for a new run)."""
        trackers = [TensorBoard(paths, first_step + 1 if first_step else 0)] if spec.observe.tensorboard else []
        if spec.observe.wandb_project:
            trackers.append(WandB(spec, paths))
        return cls(trackers)

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def scalars(self, step: int, values: dict[str, float | None]) -> None:
        values = {tag: float(v) for tag, v in values.items() if v is not None}
        self.pending += [self.writer.submit(tracker.scalars, step, values) for tracker in self.trackers]

    def flush(self) -> None:
        """Waits until everything logged so far is written (not only queued); raises what a write raised."""
        self.pending += [self.writer.submit(tracker.flush) for tracker in self.trackers]
        pending, self.pending = self.pending, []
        for write in pending:
            write.result()

    def close(self) -> None:
        if self.writer:
            self.writer.shutdown(wait=True)
        for tracker in self.trackers:
            tracker.close()
        self.trackers, self.writer = [], None
