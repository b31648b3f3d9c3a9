"""What a run reports: the rank map at start, one line and one JSON object per epoch, progress bars.

Process 0 speaks for the job; every process writes its own rank report, merged after a barrier (through
the coordination service: process 0 opens no file per rank).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from dali_launch.trainer import coordination
from dali_launch.trainer.data import bad_samples
from dali_launch.trainer.observe.profile import Profile
from dali_launch.trainer.observe.progress import Progress as LiveProgress
from dali_launch.trainer.observe.trackers import Trackers
from dali_launch.trainer.plan import mesh
from dali_launch.trainer.run_dir import RunPaths, read_jsonl, write_atomic
from dali_launch.trainer.topology import Topology, barrier


@dataclass
class EpochMetrics:
    epoch: int
    train_loss: float
    train_samples: int
    epoch_time_s: float
    images_per_s: float
    images_per_s_per_device: float | None = None
    data_wait_fraction: float | None = None  # share of the epoch the devices sat idle waiting for DALI
    host_wait_fraction: float | None = None  # share of it the host spent waiting for DALI (input_wait.py)
    compile_s: float | None = None  # the run's first device call, compilation included
    checkpoint_wait_s: float | None = None  # training blocked by checkpoints since the last epoch's line
    between_epochs_s: float | None = None  # the host's time from the last epoch's end to this one's first call
    checkpoint_behind_calls: int = 0  # this epoch's first calls its starting checkpoint was written behind
    first_step_s: float | None = None  # launch -> first step done (local mode knows the launch time)
    startup: dict | None = None  # start-up phase -> seconds since startup_since, when it ended (first epoch)
    startup_since: str | None = None
    test: dict | None = None  # the task's summary of the test set (tasks/contract.py): test_<name> in the JSON line
    headline: str | None = None  # which of `test` the epoch line shows (the JSON line: "test_<name>")
    better: str | None = None  # which way the headline improves: "higher" or "lower" (Task.better_for)
    unit: str = "samples"  # what the test set's count counts
    test_count: int | None = None
    eval_time_s: float | None = None
    eval_devices: int | None = None  # the devices that evaluated (--eval-on): every device of the job, or process 0's
    eval_sharded: bool = False  # the variables evaluated as they lie, sharded over the job's devices (not gathered)
    eval_ahead: dict | None = None  # the first evaluation's build and compile in epoch 0 (evaluate.prepare), its wait
    learning_rate: float | None = None  # the rate of the epoch's last optimizer update
    resumed_at_call: int | None = None  # a resumed epoch: its time and images/s cover the calls from here on
    step: int | None = None  # global SGD steps done at the epoch's end: the trackers' x axis
    bad_samples: int = 0  # training samples left out by --bad-samples skip (RUN/bad_samples.jsonl)
    skipped_steps: int = 0  # SGD steps --on-nan skip-step dropped (of this task's part of the epoch)
    train_metrics: dict | None = None  # the task's training metrics, means over the epoch's real samples

    def as_json(self) -> dict:
        """metrics.jsonl's object: the test summary flat (test_accuracy, test_miou...), `headline` naming its key
        and `better` which way it improves, the training metrics as train_<name>."""
        values = dataclasses.asdict(self)
        test, headline, train = values.pop("test") or {}, values.pop("headline"), values.pop("train_metrics") or {}
        better = values.pop("better")
        values.pop("unit")
        values |= {f"test_{name}": _plain(value) for name, value in test.items()}
        values |= {f"train_{name}": value for name, value in train.items()}
        return values | ({"headline": f"test_{headline}", "better": better} if headline else {})


class Reporter:
    def __init__(self, paths: RunPaths, topology: Topology, barrier_timeout_s: int, live: LiveProgress):
        """`live`: what process 0 tells `status` of the steps (observe/progress.py)."""
        self.paths, self.topology, self.live = paths, topology, live
        self.barrier_timeout_s = barrier_timeout_s
        self.lead = topology.process_id == 0
        self.console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
        self.last: dict | None = None
        self.trackers = Trackers()  # TensorBoard, W&B: opened by `track` on process 0
        self.profile = None

    def track(self, spec, first_step: int, steps_per_call: int) -> None:
        """Opens the run's trackers (process 0), continuing after global SGD step `first_step`, and
        the profiler's trace (--profile-ranks)."""
        if self.lead:
            self.trackers = Trackers.open(spec, self.paths, first_step)
        self.profile = Profile(
            spec, self.topology.process_id, steps_per_call, lambda line: self.console.print(line, markup=False)
        )

    def close(self) -> None:
        """However the task ends: what the trackers and the profiler hold reaches the disk (or W&B)."""
        self.trackers.close()
        if self.profile:
            self.profile.stop()

    def say(self, text: str) -> None:
        if self.lead:
            self.console.print(text, markup=False)

    def rank_report(
        self, sharding, devices: list, batch_size: int, resolved: dict, dali: str = "", state_bytes_per_device: int = 0
    ) -> None:
        """Every process writes and prints what it is; process 0 merges the reports into rank_map.json from
        the coordination service, not from N files (each rank's own file is for the launcher's `cancel`)."""
        t = self.topology
        report = {
            "process_id": t.process_id,
            "host": t.host,
            "pid": os.getpid(),
            "num_processes": t.num_processes,
            "num_nodes": t.num_nodes,  # SLURM's pick, where --nodes gave a range
            "devices": [str(d) for d in devices],
            "device_indices": list(sharding.device_ids),
            "num_devices": sharding.global_devices,
            "readers_per_device": sharding.readers,
            "dali_shards": list(sharding.shard_ids),
            "num_dali_shards": sharding.num_shards,
            "batch_per_device_step": batch_size,
            "resolved": resolved,
            "state_bytes_per_device": state_bytes_per_device,  # parameters, optimizer state, EMA: as laid out
        }
        write_atomic(self.paths.rank_report(t.process_id), json.dumps(report))
        if t.num_processes > 1:
            coordination.publish(f"rank-report/{t.process_id}", json.dumps(report))
        # Each rank says its own line, so it lands in its own log under its own prefix.
        readers = f" ({sharding.readers} readers per device)" if sharding.readers > 1 else ""
        self.console.print(
            f"rank {t.process_id} on {t.host}: devices {', '.join(report['devices'])} (job devices "
            f"{report['device_indices']} of {report['num_devices']}); DALI shards "
            f"{report['dali_shards']} of {report['num_dali_shards']}{readers}; "
            f"{_steps(resolved['steps_per_call'])} of {batch_size} per call ({_how(resolved)})"
            f"{'; ' + dali if dali else ''}",
            markup=False,
        )
        barrier("rank-reports-written", self.barrier_timeout_s)
        if self.lead:
            reports = coordination.collect("rank-report") if t.num_processes > 1 else {"0": json.dumps(report)}
            ranks = [json.loads(reports[str(i)]) for i in range(t.num_processes)]
            write_atomic(self.paths.rank_map, json.dumps(ranks, indent=2))

    def resumed(self, epoch: int, calls_done: int, step: int, read: tuple[int, int]) -> None:
        """Metrics of epochs from `epoch` on will be written again: drop any earlier copies. `read`: the state's
        bytes this process read of all of them (a sharded state: its own shards)."""
        if self.lead and self.paths.metrics.exists():  # a line cut short (a full disk) is left out with them
            kept = [m for m in read_jsonl(self.paths.metrics) if isinstance(m.get("epoch"), int) and m["epoch"] < epoch]
            write_atomic(self.paths.metrics, "".join(json.dumps(m) + "\n" for m in kept))
            self.last = kept[-1] if kept else None
        here, total = read
        part = "the whole state" if here >= total else f"its own shards, {here / 2**20:.1f} of {total / 2**20:.1f} MiB"
        self.say(f"resumed from checkpoint {step}: epoch {epoch}, {calls_done} device calls into it; read {part}")

    @contextlib.contextmanager
    def progress(self, epoch: int, steps: int, done: int = 0, per_call: int = 1):
        """Yields `advance()`, called after each of the epoch's `steps` device calls (`per_call` SGD steps each)
        from `done` on: what `status` says (progress.json), and a live bar only for process 0 on a terminal,
        drawn on the process's own terminal: never into a log (`train` copies its output into logs/rank-0.log,
        whose readers, `logs --follow`, would get every frame of it: ANSI codes and carriage returns)."""
        told = self.live.epoch(epoch, steps, done, per_call)
        terminal = sys.__stdout__
        try:
            if not (self.lead and terminal is not None and terminal.isatty()):
                yield told
                return
            columns = (TextColumn(f"epoch {epoch}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            console = Console(file=terminal, highlight=False, soft_wrap=True)
            with Progress(
                *columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False
            ) as bar:
                task = bar.add_task("train", total=steps, completed=done)
                yield lambda: (told(), bar.advance(task))
        finally:
            self.live.finishing(epoch)

    def epoch(self, metrics: EpochMetrics, left_out: tuple = ()) -> None:
        """An epoch's line and JSON object; `left_out`: the scans of what the readers leave out (bad_samples.py)."""
        self.last = metrics.as_json()
        if not self.lead:
            return
        with self.paths.metrics.open("a") as f:
            f.write(json.dumps(self.last) + "\n")
        if left_out:
            write_atomic(self.paths.bad_samples, bad_samples.jsonl(left_out))
        m = metrics
        self.trackers.scalars(
            m.step,
            {
                "epoch/train_loss": m.train_loss,
                **{f"epoch/test_{name}": v for name, v in (m.test or {}).items() if np.ndim(v) == 0},
                **{f"epoch/train_{name}": v for name, v in (m.train_metrics or {}).items()},
                "epoch/images_per_s": m.images_per_s,
                "epoch/data_wait_fraction": m.data_wait_fraction,
                "epoch/host_wait_fraction": m.host_wait_fraction,
                "epoch/time_s": m.epoch_time_s,
                "epoch/eval_time_s": m.eval_time_s,
                "perf/compile_s": m.compile_s,
                "perf/checkpoint_wait_s": m.checkpoint_wait_s,
            },
        )
        self.trackers.flush()  # an epoch's scalars are on disk once its line is printed
        extra = f"  compile {m.compile_s:.1f} s" if m.compile_s is not None else ""
        extra += f"  first step {m.first_step_s:.1f} s after launch" if m.first_step_s is not None else ""
        resumed = f" since resuming at device call {m.resumed_at_call}" if m.resumed_at_call else ""
        extra += (
            f"  {_counted(m.bad_samples, 'bad sample')} left out ({self.paths.bad_samples.name})"
            if m.bad_samples
            else ""
        )
        extra += f"  {_counted(m.skipped_steps, 'step')} skipped (loss not finite)" if m.skipped_steps else ""
        trained = "".join(f"  {name} {value:.4f}" for name, value in (m.train_metrics or {}).items())
        lower = ", lower is better" if m.better == "lower" else ""  # higher, as accuracy is, goes unsaid
        tested = (
            f"test {m.headline.replace('_', ' ')} {m.test[m.headline]:.4f} ({m.test_count} {m.unit}{lower})"
            if m.test
            else ""
        )
        self.say(
            f"epoch {m.epoch}: loss {m.train_loss:.4f}{trained}  {tested}  "
            f"{m.images_per_s:,.0f} images/s ({m.images_per_s_per_device:,.0f} per "
            f"device)  epoch {m.epoch_time_s:.2f} s{resumed} ({m.data_wait_fraction:.0%} waiting for data; "
            f"the host waited {m.host_wait_fraction:.0%})  "
            f"eval {m.eval_time_s:.2f} s on {m.eval_devices} device{'s' if m.eval_devices != 1 else ''}{extra}"
        )
        if m.startup:
            self.say(
                f"  start-up, s since {m.startup_since}: "
                + ", ".join(f"{phase} {t:.1f}" for phase, t in m.startup.items())
            )


def _plain(value):
    """A summary value as JSON takes it: a number, or a list (an array of per-class values)."""
    return np.asarray(value).tolist() if np.ndim(value) else float(value)


def _how(resolved: dict) -> str:
    """--parallel, and --mesh where it shards the train state (plan/mesh.py)."""
    setting = resolved.get("mesh") or "auto"  # a run directory written before --mesh existed: none
    layout = mesh.parse(setting)
    how = f"{resolved['parallel']}, mesh {setting}" if layout and layout.shards_state else resolved["parallel"]
    return how + (", optimizer state in host memory" if resolved.get("offload") == "optimizer" else "")


def _steps(k: int) -> str:
    return f"{k} step" if k == 1 else f"{k} steps"


def _counted(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
