"""What every task runs: read the spec, find its place in the job, train, report how it ended.

Local mode starts it as `python -m dali_launch.trainer RUN_DIR`; SLURM through submitit calls
`run_followed_task(RUN_DIR)`. Either way the spec on disk is the only input, so a task can be re-run by hand.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path

from dali_launch.trainer import compile_cache, flavours, heap, rendezvous
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.entries import Entries
from dali_launch.trainer.entry_points import Sent
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.observe.library_output import tag_library_output
from dali_launch.trainer.observe.manifest import write_manifest
from dali_launch.trainer.observe.progress import Progress
from dali_launch.trainer.observe.startup import Startup
from dali_launch.trainer.plan.placement import place
from dali_launch.trainer.resilience import disk, ending, preemption, start_point
from dali_launch.trainer.resilience.watchdog import Watchdog
from dali_launch.trainer.run_dir import RunPaths, hold_lock, write_atomic
from dali_launch.trainer.topology import (
    Topology,
    barrier,
    configure_process_env,
    from_environment,
    initialize,
    job_devices,
    local_devices,
    missing_gpu,
)


def run_task(run_dir: str, log: str | None = None) -> dict:
    """`log`: the file this process's output also goes to, where the caller writes it itself (`train`)."""
    startup = Startup()
    preemption.catch_early()  # SLURM's warning may come before the task listens
    heap.fewer_collections()
    spec = TaskSpec.load(run_dir)
    topology = from_environment(spec.layout, spec.distributed.platform)
    paths = RunPaths(run_dir)
    entries = Entries(spec, Sent().read(paths.objects))  # each resolved once, when first needed; by value: objects/
    ending.clear(paths, topology.process_id)
    ending.record_faults(paths, topology.process_id, Path(log) if log else None)
    progress = Progress(paths, writes=topology.process_id == 0)  # what `status` says it does
    startup.listener = progress.phase
    start, startup_s = rendezvous.this_start(os.environ), spec.distributed.init_timeout_s
    watchdog = Watchdog(paths, topology, spec.resilience, start, startup_s)
    if topology.num_processes > 1:
        watchdog.start()  # from now: a rank stuck in its start-up is named, not waited for (watchdog.py)
    with ending.failures_recorded(paths, topology.process_id, topology.num_processes > 1):
        lock = _lock(paths) if topology.process_id == 0 else None
        try:
            result = _train(entries, topology, paths, startup, watchdog, progress)
        except OSError as e:  # a write the file system refused: one line, how to go on
            if disk.refusal(e) is None:
                raise
            raise disk.write_refused(paths, e, spec.how_to_resume()) from None
        finally:
            progress.stop()
            compile_cache.write_pending()  # a stopped or failed task's programs too: its resumption starts warm
            if lock:
                lock.close()
    ending.record(paths, topology.process_id, ending.DONE)
    return result


def run_followed_task(run_dir: str) -> dict:
    """A submitted SLURM job's task, whose launcher follows its output from files: what its libraries' threads
    print (and the traceback it may end with) is tagged, as a --local rank's is, so that the console keeps
    the run's own lines and the log keeps everything (observe/library_output.py)."""
    tag_library_output()
    return run_task(run_dir)


def _lock(paths: RunPaths):
    """Process 0 holds the run directory's task lock while the task runs: `--resume` refuses it."""
    lock = hold_lock(paths.lock("task"))
    if lock is None:
        raise UsageError(
            f"another job is running in {paths.root} ({paths.lock('task')} is held); wait for it to end, or stop it"
        )
    return lock


def _train(
    entries: Entries, topology: Topology, paths: RunPaths, startup: Startup, watchdog: Watchdog, progress: Progress
) -> dict:
    spec = entries.spec
    if topology.platform == "gpu" and (why := missing_gpu()):  # a node without GPUs: one line, not JAX's pages
        raise UsageError(f"--platform gpu, but on {topology.host} {why}; run on GPU nodes, or use --platform cpu")
    placement = place(spec, topology.platform, entries)  # the plan's first step: what the environment must say first
    configure_process_env(topology, placement)  # before the first `import jax`
    flavours.check()
    cache = compile_cache.use(spec)  # JAX imported, before anything compiles
    # Process 0 listens where it can and tells the others (rendezvous.py)
    topology = initialize(
        topology, spec.distributed, partial(rendezvous.settle, paths=paths), rendezvous.taken_after_probe
    )
    watchdog.meet()
    compile_cache.every_process_writes(cache, topology.process_id)  # after initialize: which process this is
    preemption.listen(topology, paths)  # after initialize: JAX and submitit install their own handlers before it
    devices = local_devices(topology)
    startup.warm_up(devices)  # the devices' first transfer in a thread, beside the imports and the build
    startup.mark("jax initialized")
    from dali_launch.trainer.observe.metrics import Reporter  # Flax, Optax, Orbax, DALI: while the devices warm up
    from dali_launch.trainer.plan import Inputs, facts
    from dali_launch.trainer.train import train_and_evaluate

    heap.freeze_imports()
    if topology.process_id == 0:
        write_manifest(paths, spec, topology, devices)
    startup.mark("imports")
    job = job_devices(devices, topology.process_id)
    here = facts.gather(spec, topology, devices, job)  # this task's facts, once: the plan's input
    if topology.process_id == 0:  # a requeued job has no launcher to check its newest checkpoint: here
        for line in start_point.repair(paths):
            print(f"dali-launch: {line}", file=sys.stderr, flush=True)
    barrier("checkpoints-checked", spec.distributed.barrier_timeout_s)
    start = start_point.read(paths, spec, topology.process_id, topology.num_processes, here.job_device_count)
    startup.mark("checkpoints read")
    reporter = Reporter(paths, topology, spec.distributed.barrier_timeout_s, progress)
    try:  # planned and built from these alone (set_up.py calls the plan's stages)
        result = train_and_evaluate(Inputs(spec, here, start, placement, entries), reporter, startup)
    finally:
        reporter.close()  # event files and W&B flushed, a trace stopped: also when preempted or failing
        watchdog.stop()
    if topology.process_id == 0:
        write_atomic(paths.result, json.dumps(result, indent=2))
    return result
