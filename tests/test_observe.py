"""What a run shows of itself: TensorBoard events and a W&B run that continue across a preemption
without a step twice or a step missing, and a profiler trace the profiler's own tooling reads."""

from __future__ import annotations

import glob
import gzip
import json
import signal
import struct
import time

import pytest
from conftest import check_ok, dali_launch, start, stop_when
from run_readers import has_checkpoint, only_run

WANDB = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}  # a W&B run on disk, no account
STEP_TAGS = ("train/loss", "train/learning_rate", "perf/images_per_s", "perf/step_time_ms", "perf/data_wait_fraction")
EPOCH_TAGS = (
    "epoch/train_loss",
    "epoch/test_accuracy",
    "epoch/images_per_s",
    "epoch/data_wait_fraction",
    "epoch/host_wait_fraction",
    "epoch/time_s",
    "epoch/eval_time_s",
)


def scalars(folder) -> dict[str, list[int]]:
    """Tag -> steps, as TensorBoard shows them (its reader applies purge_step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    reader.Reload()
    return {tag: [e.step for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


def wandb_history(path: str) -> tuple[str, list[int]]:
    """The run id and the logged steps of one offline W&B run file (run-ID.wandb): W&B writes its
    records in LevelDB's log format (32 KiB blocks, 7-byte record headers) after a 7-byte header."""
    from wandb.proto import wandb_internal_pb2

    data, block = open(path, "rb").read(), 32768
    assert data[:4] == b":W&B"
    pos, pending, run_id, steps = 7, b"", None, []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:  # a block's zero-padded tail
            pos += left
            continue
        pending, pos = pending + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a whole record, or a record's last piece
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "run":
                run_id = record.run.run_id
            elif record.WhichOneof("record_type") == "history":
                steps.append(record.history.step.num)
    return run_id, steps


@pytest.mark.slow
def test_events_and_wandb_continue_across_a_preemption(mnist_lmdb, tmp_path):
    """80 calls an epoch, a sync point every 10, scalars every 20 steps: SIGUSR2 once a checkpoint
    shows epoch 0 under way, then --resume. TensorBoard shows each step of the uninterrupted run's
    grid once; the W&B run keeps its id and its step axis goes on where the first part stopped."""
    train = ["train", "--data-dir", str(mnist_lmdb), "--epochs", "2", "--gpus-per-node", "2"]
    every = ["--log-every-steps", "20", "--checkpoint-every-steps", "20", "--wandb-project", "dali-launch-test"]
    proc = start(*train, *every, "--run-root", str(tmp_path), env=WANDB)
    err = stop_when(proc, lambda: proc.poll() is not None or has_checkpoint(tmp_path), signal.SIGUSR2)
    paths = only_run(tmp_path)
    assert proc.returncode != 0 and "preempted; checkpoint written at step" in err, err
    stopped_at = json.loads(paths.ending(0).read_text())["step"]  # device calls = SGD steps here
    assert 20 <= stopped_at < 160 and not paths.result.exists()
    first_part = scalars(paths.tensorboard)["train/loss"]
    assert first_part and max(first_part) <= stopped_at

    check_ok(dali_launch("train", "--resume", str(paths.root), env=WANDB))
    assert len(list(paths.tensorboard.glob("events.out.tfevents.*"))) == 2  # one file per incarnation
    steps = scalars(paths.tensorboard)
    for tag in STEP_TAGS:
        assert steps[tag] == list(range(20, 161, 20)), tag  # every 20 steps, once each
    for tag in EPOCH_TAGS:
        assert steps[tag] == [80, 160], tag
    assert steps["perf/compile_s"][0] == 80  # each incarnation compiles once, at its first epoch

    run_id = json.loads(paths.wandb_run.read_text())["id"]
    parts = [wandb_history(f) for f in sorted(glob.glob(f"{paths.root}/wandb/offline-run-*-{run_id}/run-*.wandb"))]
    assert len(parts) == 2 and {rid for rid, _ in parts} == {run_id}
    (_, before), (_, after) = parts
    assert max(before) <= stopped_at < min(after)
    logged = sorted(set(before + after))
    assert logged == sorted(set(range(20, 161, 20))) and before + after == sorted(before + after)


@pytest.mark.slow
def test_profile_steps_write_a_readable_trace(small_lmdb, tmp_path):
    """--profile-steps 3:6 with 2 steps per call: calls 1 and 2 traced into rank 0's folder; the
    profiler's own reader parses the XSpace and the Perfetto trace is JSON with events."""
    from jax.profiler import ProfileData

    check_ok(
        dali_launch(
            "train",
            "--data-dir",
            str(small_lmdb),
            "--epochs",
            "1",
            "--gpus-per-node",
            "2",
            "--steps-per-call",
            "2",
            "--profile-steps",
            "3:6",
            "--run-root",
            str(tmp_path),
        )
    )
    paths = only_run(tmp_path)
    [xplane] = paths.profile(0).glob("plugins/profile/*/*.xplane.pb")
    planes = [plane.name for plane in ProfileData.from_file(str(xplane)).planes]
    assert "/host:CPU" in planes, planes
    [trace] = paths.profile(0).glob("plugins/profile/*/*.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any("pmap" in e.get("name", "") or "jit" in e.get("name", "") for e in events)
    # 800 samples, 2 devices × 50 × 2 steps a call: 4 calls, 8 steps
    assert scalars(paths.tensorboard)["epoch/test_accuracy"] == [8]


def test_profile_steps_past_the_last_step_are_refused_before_the_first(small_lmdb, tmp_path):
    """No trace and no word was the answer. The launcher refuses a range past the most steps the data can
    make (before anything is written); the task counts them exactly and refuses the rest."""
    args = ["--data-dir", str(small_lmdb), "--epochs", "1", "--gpus-per-node", "2"]
    proc = dali_launch("train", *args, "--profile-steps", "20:30", "--run-root", str(tmp_path / "launcher"))
    assert proc.returncode == 2 and not (tmp_path / "launcher").exists(), proc.stderr
    said = "--profile-steps 20:30 starts past the run's last SGD step (1 epoch of 800 samples over 2 devices take "
    assert said + "fewer than 11 steps)" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = dali_launch("train", *args, "--profile-steps", "8:20", "--run-root", str(tmp_path / "task"))
    assert proc.returncode == 2, proc.stderr
    said = "--profile-steps 8:20 starts past the run's last SGD step 7 (1 × 8 steps an epoch); trace steps below 8, "
    assert said + "e.g. --profile-steps 0:8" in proc.stderr, proc.stderr
    assert not only_run(tmp_path / "task").metrics.exists()  # before the first step
    proc = dali_launch("train", *args, "--profile-steps", "6:20", "--run-root", str(tmp_path / "cut"))  # runs over
    check_ok(proc)
    folder = only_run(tmp_path / "cut").profile(0)
    said = f"profile of steps 6:8 written to {folder} (the run ended at step 8, before the 6:20 asked)"
    assert said in proc.stdout + proc.stderr and list(folder.rglob("*.xplane.pb")), proc.stdout


def test_step_log_rate_leaves_out_compilation_and_logs_on_the_grid():
    """The pure bookkeeping: which sync points log, and what an interval's values are."""
    import jax.numpy as jnp

    from dali_launch.trainer.config import ObserveConfig, TaskSpec
    from dali_launch.trainer.observe.step_log import StepLog
    from dali_launch.trainer.step.optim import schedule

    class Recorder:
        def __init__(self):
            self.rows = []

        def __bool__(self):
            return True

        def scalars(self, step, values):
            self.rows.append((step, values))

    spec = TaskSpec(run_dir="unused", observe=ObserveConfig(log_every_steps=25))
    rec = Recorder()
    log = StepLog(spec, rec, steps_per_call=2, schedule=schedule(spec.optimizer, spec.step.epochs, 100))
    tally = lambda loss, count: {"loss": jnp.array([loss]), "count": jnp.array([count])}
    log.begin_epoch(0, None)
    log.compiled(tally(10.0, 100), 0.0)
    for calls in (10, 20, 30):  # sync points every 10 calls = 20 steps: 25 and 50 crossed at 40 and 60
        time.sleep(0.01)
        log.point(calls, tally(10.0 * calls, 100 * calls), 0.0001 * calls)
    assert [step for step, _ in rec.rows] == [40, 60]
    values = rec.rows[0][1]
    assert values["train/loss"] == pytest.approx(0.1) and values["train/learning_rate"] == pytest.approx(0.1)
    assert values["perf/step_time_ms"] > 0 and 0 < values["perf/data_wait_fraction"] < 1
    # images/s counts the samples after the first call: 1,900 of them, over the interval's time
    assert values["perf/images_per_s"] * values["perf/step_time_ms"] * 38 / 1000 == pytest.approx(1900)
