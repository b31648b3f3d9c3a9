"""The data side's decisions: how many DALI pipelines read each device's shard, with how many threads, what they
output, what they keep decoded, and how the rest of an epoch begun elsewhere is read.

decoder          where DALI decodes (plan/placement.py): cpu on CPU devices; on GPUs the pipeline's word
reader_threads   DALI CPU threads per pipeline: CPU_DECODE_THREADS where the CPU decodes (more readers
                 instead), the cores per device (at most MAX_GPU_DECODE_THREADS) where nvJPEG does
readers          DALI pipelines per device: 1 on CPU devices and where nvJPEG decodes; else on GPUs the most
                 of 8, 4, 2, 1 that divides the device's batch and whose threads fit its cores
feed_workers     --sample-order global: DALI worker processes per pipeline reading its records: the cores
                 per device its pipelines' threads leave, at most MAX_FEED_WORKERS (0: in-process)
output_dtype     what image pipelines output: float16 under --precision bf16 (DALI has no bfloat16; the model
                 casts on the device), else float32
decoded_cache    --decoded-cache auto keeps each training sample decoded where AUTO_KINDS says a kind won on the
                 platform, or in DALI's decoder cache on GPUs for a pipeline that decodes whole images anyway (the
                 tasks' own: the cache only takes decoding away), and where the decoded split (data/memory.py's
                 estimate) fits: the CPU decoder's in host memory
                 (this process's shards within a quarter of the available memory, shared by the host's processes),
                 nvJPEG's in DALI's decoder cache (a device's shard, with a quarter to spare, within the GPU memory
                 XLA's pool leaves less 8 GiB); off under --sample-order global and for pipelines that do not
                 decode through args.decode; a resumed run keeps its checkpoint's kind (another kind is another
                 DALI graph, which its states do not fit)
remainder        shard order, resumed mid-epoch on another layout than the checkpoint's (devices, readers, batch,
                 steps per call): how the rest of that epoch is read here (data/hosting.py; else None)
"""

from __future__ import annotations

import math

from dali_launch.trainer.config import DataConfig, TaskSpec
from dali_launch.trainer.data.decided import DECODER, HOST, OFF, DataPlan
from dali_launch.trainer.data.hosting import ShardLayout
from dali_launch.trainer.data.memory import Room
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan.facts import Facts

CPU_DECODE_THREADS = 2  # per reader, where the CPU decodes: more readers scale better than more threads
MAX_GPU_DECODE_THREADS = 8  # nvJPEG's host side: 8 threads decoded 1.26-1.8x faster than 4 on an H200
MAX_FEED_WORKERS = 4  # one reads as fast as DALI's own reader; more ride out slow reads
# What auto turns on where it fits, by platform: only a kind measured faster than decoding every epoch there
# (benchmarks/against.py; tests/test_decoded_cache.py holds this table to the measured runs). The host table lost
# on both: MNIST's epoch 0.61 s with it, 0.23 s without, on one H200 (DALI's CPU python_function converts each
# sample under the GIL the loop needs); about even on 2 CPU cores. DALI's decoder cache changes how ResNet-50's GPU
# path decodes and is not measured yet. A SIZE turns either kind on.
AUTO_KINDS: dict[str, tuple[str, ...]] = {"cpu": (), "gpu": ()}
DECODER_SLACK = 1.25  # DALI's decoder cache sized a quarter above the estimate: no image left out by its error


def plan_data(spec: TaskSpec, facts: Facts, decoder: str, step, start, pipeline) -> DataPlan:
    """The data side's decisions for the step plan's batch (`step`), `decoder` the placement's, for the pipeline
    function `pipeline` (the run's, resolved once: entries.py)."""
    from dali_launch.trainer.data import contract

    cores, data = facts.cores_per_device, spec.data
    threads = reader_threads(data.reader_threads, decoder, cores)
    readers = readers_per_device(data.readers_per_device, threads, facts.platform, decoder, step.call_batch, cores)
    share = facts.local_device_count / facts.job_device_count if decoder == "cpu" else 1 / facts.job_device_count
    cacheable = contract.cacheable(pipeline, data.pipeline, data.decoded_cache)
    whole = contract.decodes_whole_images(pipeline)
    kept = decoded_cache(data, decoder, cacheable, facts.room.shared(share), start.decoded_cache, facts.platform, whole)
    layout = ShardLayout(facts.job_device_count, readers, step.batch_per_device_step, step.steps_per_call)
    return DataPlan(
        data,
        decoder=decoder,
        reader_threads=threads,
        readers_per_device=readers,
        output_dtype=output_dtype(spec),
        sample_order=data.sample_order,
        feed_workers=feed_workers(data.feed_workers, data.sample_order, cores, readers, threads),
        decoded_cache=kept[0],
        decoded_cache_mb=kept[1],
        decoded_cache_note=kept[2],
        remainder=start.remainder(layout, spec.step.elastic_batch),
        function=pipeline,
    )


def reader_threads(setting: int, decoder: str, cores_per_device: int) -> int:
    """--reader-threads, where 0 (auto) follows the rule above."""
    if setting:
        return setting
    return CPU_DECODE_THREADS if decoder == "cpu" else max(1, min(MAX_GPU_DECODE_THREADS, cores_per_device))


def readers_per_device(setting: int, threads: int, platform: str, decoder: str, batch: int, cores: int) -> int:
    """--readers-per-device, where 0 (auto) follows the rule above for a device's `batch` (samples per call, or
    evaluation's per step) and `cores` per device."""
    if setting:
        return setting
    if platform != "gpu" or decoder == "mixed":
        return 1
    fits = [r for r in (8, 4, 2, 1) if batch % r == 0 and r * threads <= cores]
    return fits[0] if fits else 1


def feed_workers(setting: int, order: str, cores_per_device: int, readers: int, threads: int) -> int:
    """--feed-workers, where -1 (auto) takes the cores per device left by the pipelines' threads."""
    if order != "global":
        return 0
    if setting >= 0:
        return setting
    return max(0, min(MAX_FEED_WORKERS, (cores_per_device - readers * threads) // readers))


def output_dtype(spec: TaskSpec) -> str:
    if spec.data.output_dtype != "auto":
        return spec.data.output_dtype
    return "float16" if spec.model.precision == "bf16" else "float32"


def decoded_cache(
    data: DataConfig,
    decoder: str,
    cacheable: bool,
    room: Room,
    kept: str | None = None,
    platform: str = "cpu",
    whole: bool = False,
) -> tuple[str, int, str]:
    """--decoded-cache as (kind, MiB, what the start-up line says), by the rule above. `room`: as this process
    (host) or a device (decoder) shares the split (Room.shared); `kept`: a resumed checkpoint's kind (None: afresh);
    `whole`: the pipeline decodes whole training images anyway (contract.Pipeline.whole_images)."""
    setting, kind = data.decoded_cache_mb(), HOST if decoder == "cpu" else DECODER
    chosen = kind in AUTO_KINDS[platform] or (kind == DECODER and whole)
    if data.sample_order == "global" or kept == OFF or (kept is None and setting == 0):
        why = "--sample-order global" if data.sample_order == "global" else "--decoded-cache off"
        return OFF, 0, f"off ({'the checkpoint resumed was written without one' if kept == OFF else why})"
    if not cacheable:
        return OFF, 0, "off (the pipeline does not decode through args.decode)"
    if kept is None and setting is None and not chosen:
        return (
            OFF,
            0,
            f"off (auto: no {kind} cache was measured faster than decoding on {platform.upper()}s; --decoded-cache SIZE keeps one)",
        )
    need = room.split_mb
    may = setting or (room.host_mb if kind == HOST else room.device_mb)
    partial = kind == DECODER and setting  # DALI's cache holds what fits; a host table must hold every sample
    if kept is None and not partial and need is None:
        return OFF, 0, "off (the decoded size of the data set is unknown: a format records/ does not read)"
    if kept is None and not partial and need > may:
        return OFF, 0, f"off (~{need:,.0f} MiB decoded would not fit in the {may:,} MiB it may use)"
    if kind == HOST:
        mb, where = math.ceil(need if need is not None else may), "in host memory"
    else:
        mb, where = may if need is None else min(may, math.ceil(need * DECODER_SLACK)), "in DALI's decoder cache"
    mb = max(1, mb)
    return kind, mb, f"{where}: {mb:,} MiB" + (" (as the checkpoint resumed)" if kept else "")


def check_readers(readers: int, batches: dict[str, int]) -> None:
    """--readers-per-device divides every batch its pipelines read (`batches`: what each is, in words -> its size):
    each of a device's readers reads an equal part. The launcher checks it for every device count a job may
    start with, before anything is written; a task's data side meets the same rule."""
    if readers < 0:
        raise UsageError(f"--readers-per-device {readers} must be 0 (auto) or more")
    for name, size in batches.items():
        if readers and size % readers:
            raise UsageError(
                f"--readers-per-device {readers} does not divide {name}, {size}; use a divisor of {size} or 0 (auto)"
            )
