"""Where this task sits in the job: process id, process count, coordinator and local devices.

The launcher's local mode and SLURM describe a task through different environment variables; a reader per
starter (two tables of names) maps them to the same fields, so nothing after `from_environment` knows which
backend started it.
JAX's own SLURM detection is not used: it assumes one GPU per task
(https://github.com/jax-ml/jax/issues/16788).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass

from dali_launch.trainer import jax_private
from dali_launch.trainer.config import DistributedConfig, Layout
from dali_launch.trainer.data import codecs
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan.placement import Placement

LOCAL_ENV = {
    "process_id": "DALI_LAUNCH_PROCESS_ID",
    "num_processes": "DALI_LAUNCH_NUM_PROCESSES",
    "local_rank": "DALI_LAUNCH_LOCAL_RANK",
    "coordinator_address": "DALI_LAUNCH_COORDINATOR",
}
LAUNCHED_AT = "DALI_LAUNCH_LAUNCHED_AT"  # time.time() when the launcher started the ranks (local mode)
LAUNCHER_PID = "DALI_LAUNCH_LAUNCHER_PID"  # the local launcher, whose death ends the rank
# SLURM's names for the same, and for the job facts the launcher's srun-step backend reads too
# (launcher/backends/srun_step.py): one table of SLURM's variables.
SLURM_ENV = {
    "process_id": "SLURM_PROCID",
    "num_processes": "SLURM_NTASKS",
    "local_rank": "SLURM_LOCALID",
    "nodelist": "SLURM_JOB_NODELIST",
    "num_nodes": "SLURM_NNODES",
    "tasks_per_node": "SLURM_NTASKS_PER_NODE",
    "gpus_on_node": "SLURM_GPUS_ON_NODE",
    "job_id": "SLURM_JOB_ID",
    "restart_count": "SLURM_RESTART_COUNT",
    # srun's own step: one started in an allocation (salloc, a user's sbatch) may use only some of the job
    "step_id": "SLURM_STEP_ID",
    "step_nodelist": "SLURM_STEP_NODELIST",
    "step_num_nodes": "SLURM_STEP_NUM_NODES",
    "step_num_tasks": "SLURM_STEP_NUM_TASKS",
    "step_tasks_per_node": "SLURM_STEP_TASKS_PER_NODE",
}


@dataclass(frozen=True)
class Topology:
    process_id: int
    num_processes: int
    coordinator_address: str | None  # None: a single process, no jax.distributed
    local_device_count: int | None  # None: every device this process sees
    local_device_ids: tuple[int, ...] | None  # GPU ordinals for JAX; None: CPU, or all visible GPUs
    host: str
    platform: str  # "gpu" or "cpu", decided before JAX starts
    processes_on_host: int = 1  # this job's processes on this host: they share its cores
    job_id: str | None = None  # the SLURM job of a task SLURM started, else None
    restart_count: int = 0  # times SLURM requeued that job
    num_nodes: int | None = None  # the nodes SLURM gave this start (a --nodes range picks at each); else None


def expand_hostlist(nodelist: str) -> list[str]:
    """SLURM's compressed host list, e.g. `gpu[01-03,07],login1` -> gpu01 gpu02 gpu03 gpu07 login1."""
    hosts = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", nodelist):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{n:0{len(lo)}d}")
    return hosts


def coordinator_port(job_id: str) -> int:
    """A port every task of one SLURM job derives alike (the range JAX's own SLURM support uses)."""
    return int(job_id) % 4096 + 61440


class _Alone:
    """A plain single process (`dali-launch train`): nothing to read; every value is the only one."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def rank(self) -> tuple[int, int, int]:
        """(process id, process count, local rank)."""
        return 0, 1, 0

    def coordinator(self) -> str | None:
        return None

    def check(self, num_processes: int, count: int | None) -> None:
        """Nothing to check: the launcher's layout is all there is."""

    def on_host(self, num_processes: int) -> int:
        return 1

    def job_facts(self) -> dict:
        return {}


class _Started(_Alone):
    """A task one of several processes, as the program that started it describes it, through its
    variables (`names`: the keys above to its own names): submitit's JobEnvironment, one per starter."""

    names: dict[str, str] = {}

    def read(self, key: str) -> str:
        try:
            return self.env[self.names[key]]
        except KeyError:
            raise UsageError(f"{self.names[key]} is not set; start tasks through dali-launch or srun") from None

    def rank(self) -> tuple[int, int, int]:
        return int(self.read("process_id")), int(self.read("num_processes")), int(self.read("local_rank"))

    def check(self, num_processes: int, count: int | None) -> None:
        if count is None:
            raise UsageError("the launcher did not say how many devices each process has (local_device_count)")


class _LocalLauncher(_Started):
    """The launcher's local mode: every process on this host, the coordinator's address given."""

    names = LOCAL_ENV

    def coordinator(self) -> str:
        return self.read("coordinator_address")

    def on_host(self, num_processes: int) -> int:
        return num_processes


class _Slurm(_Started):
    """srun: the coordinator on the step's first node, at a port every task derives alike from the job id."""

    names = SLURM_ENV

    def coordinator(self) -> str:
        nodes = self.env.get(SLURM_ENV["step_nodelist"]) or self.read("nodelist")
        return f"{expand_hostlist(nodes)[0]}:{coordinator_port(self.read('job_id'))}"

    def check(self, num_processes: int, count: int | None) -> None:
        super().check(num_processes, count)
        if num_processes != int(self.read("num_processes")):
            raise UsageError(
                f"SLURM started {self.read('num_processes')} tasks but the job was planned for {num_processes}"
            )

    def on_host(self, num_processes: int) -> int:
        """How many tasks share this node: "2(x3)" is 2 each."""
        return int(re.match(r"\d*", self.env.get(SLURM_ENV["tasks_per_node"], "")).group() or 1)

    def job_facts(self) -> dict:
        return {
            "job_id": self.read("job_id"),
            "restart_count": int(self.env.get(SLURM_ENV["restart_count"], "0")),
            "num_nodes": _num_nodes(self.env),
        }


# The launcher says which started the task (Layout.backend): a `train` run inside an salloc must not read SLURM's.
STARTERS = {"train": _Alone, "local": _LocalLauncher, "slurm": _Slurm}


def from_environment(layout: Layout, platform: str, env: dict[str, str] | None = None) -> Topology:
    """The topology of this task: the launcher's `layout` wins, the environment fills the rest;
    `platform` is --platform (auto, gpu or cpu)."""
    env = dict(os.environ if env is None else env)
    started = STARTERS[layout.backend](env)
    # SLURM's node name: several slurmd on one host (our test cluster) share one hostname.
    host, platform = env.get("SLURMD_NODENAME") or socket.gethostname(), resolve_platform(platform)
    process_id, started_processes, local_rank = started.rank()
    num_processes, count = layout.num_processes or started_processes, layout.local_device_count
    started.check(num_processes, count)
    address = layout.coordinator_address or started.coordinator()
    return Topology(
        process_id,
        num_processes,
        address if num_processes > 1 else None,
        count,
        _gpu_ids(platform, local_rank, count, env),
        host,
        platform,
        processes_on_host=started.on_host(num_processes),
        **started.job_facts(),
    )


def _num_nodes(env: dict[str, str]) -> int | None:
    """The nodes of this task's step (srun in a larger allocation), else of its job; None if SLURM says neither."""
    count = env.get(SLURM_ENV["step_num_nodes"]) or env.get(SLURM_ENV["num_nodes"])
    return int(count) if count else None


def missing_gpu() -> str | None:
    """Why this host cannot train on GPUs (for --platform gpu), or None: an NVIDIA device and JAX's CUDA
    plugin are both needed. Asked without starting JAX (any JAX device query starts its backend)."""
    from dali_launch.trainer.flavours import JAX_CUDA, installed

    if not glob.glob("/dev/nvidia[0-9]*"):
        return "this machine has no NVIDIA GPU (no /dev/nvidia*)"
    if not installed(JAX_CUDA):
        return "JAX has no CUDA plugin here (pip install 'dali-launch[cuda12]' or [cuda13])"
    return None


def visible_gpus(env: dict[str, str] | None = None) -> int:
    """The GPUs a process here would see, counted without starting JAX: CUDA_VISIBLE_DEVICES's entries where
    it is set, else the host's NVIDIA devices."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return len([d for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() and d.strip() != "-1"])
    return len(glob.glob("/dev/nvidia[0-9]*"))


def resolve_platform(platform: str) -> str:
    """`auto` means GPUs when this host has NVIDIA devices and JAX has a CUDA plugin.

    Decided without asking JAX: any JAX device query starts the backend, and
    jax.distributed.initialize must come before that.
    """
    if platform != "auto":
        return platform
    return "cpu" if missing_gpu() else "gpu"


def _gpu_ids(platform: str, local_rank: int, count: int | None, env: dict[str, str]) -> tuple[int, ...] | None:
    """GPU ordinals of this process: its slice of the node's GPUs, by local rank.

    If SLURM already narrowed CUDA_VISIBLE_DEVICES to this task's GPUs (--gpu-bind), they are 0..count-1.
    """
    if platform == "cpu" or count is None:
        return None
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    first = 0 if len(visible) == count else local_rank * count
    return tuple(range(first, first + count))


def configure_process_env(topology: Topology, where: Placement) -> None:
    """Environment that must be set before JAX or DALI start, from `where` (the plan's first step,
    plan/placement.py): the number of CPU devices; whether XLA may run programs as CUDA graphs (--cuda-graphs);
    XLA's options; nvImageCodec's codecs (data/codecs.py); XLA's deterministic kernels (--deterministic), set
    last so they win over --xla-options."""
    if where.decoder != "mixed":  # DALI stays off the GPU
        codecs.use_cpu_codecs_only()
    if topology.platform == "gpu" and not where.cuda_graphs:
        disable_cuda_graphs()
    for name, value in where.xla_options.items():  # --xla-options (plan/xla_options.py)
        set_xla_flag(name, value)
    for name, value in where.xla_flags:
        set_xla_flag(name, value)
    if topology.platform == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
        if "jax" in sys.modules:  # `train` checked a user's --model module first, and it imported JAX
            sys.modules["jax"].config.update("jax_platforms", "cpu")
        if topology.local_device_count:
            set_xla_flag("xla_force_host_platform_device_count", topology.local_device_count)


def disable_cuda_graphs() -> None:
    """XLA launches kernels one by one: slower fused steps, but no graph capture for other CUDA work to break."""
    set_xla_flag("xla_gpu_enable_command_buffer", "")


def set_xla_flag(name: str, value) -> None:
    """--name=value in XLA_FLAGS, replacing an earlier value; XLA reads them when JAX starts a backend."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(f"--{name}=")]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--{name}={value}"])


def initialize(topology: Topology, config: DistributedConfig, meet=None, refused=None) -> Topology:
    """jax.distributed.initialize with every value explicit and every wait bounded; the topology as it met.
    `meet(topology)`: where the coordinator listens (rendezvous.settle), within the same deadline;
    `refused(error, topology)`: JAX's failure as one line of ours, or None (rendezvous.taken_after_probe)."""
    import jax

    if topology.coordinator_address is None:
        return topology
    if jax_private.backends_started():  # JAX's own refusal is a traceback
        raise UsageError(
            f"process {topology.process_id}: JAX started before jax.distributed.initialize (a module imported first "
            f"asked it for its devices: a --pipeline or --model module that builds a sharding when imported, which "
            f"`dali-launch task` imports to check it in the process that trains); make it when the function is "
            f"called, or submit the job with `dali-launch --nodes N`, whose tasks import it after"
        )
    met = [topology]
    # JAX's preemption service would take SIGTERM for itself; our handlers decide (preemption.py).
    # Should a JAX version lack the option, preemption.listen still replaces its handler afterwards.
    with contextlib.suppress(AttributeError):
        jax.config.update("jax_enable_preemption_service", False)
    # On this deadline JAX aborts the whole process from C++ with a page of stack; ours fires first
    # and leaves one line. JAX keeps its own, later, deadline as the backstop.
    watchdog = threading.Timer(config.init_timeout_s, lambda: _die(_late(met[0], config)))
    watchdog.daemon = True
    watchdog.start()
    ids = topology.local_device_ids
    try:
        met[0] = topology = meet(topology) if meet else topology
        if topology.process_id != 0:
            _wait_for_coordinator(topology.coordinator_address)
        jax.distributed.initialize(
            coordinator_address=topology.coordinator_address,
            num_processes=topology.num_processes,
            process_id=topology.process_id,
            local_device_ids=list(ids) if ids else None,
            initialization_timeout=config.init_timeout_s + 10,
            cluster_detection_method="deactivate",  # every value is given: JAX's SLURM guess never runs
            heartbeat_timeout_seconds=config.heartbeat_timeout_s,
        )
    except Exception as e:
        said = refused(e, topology) if refused else None
        if said is None:
            raise
        raise said from None
    finally:
        watchdog.cancel()
    return topology


def _late(topology: Topology, config: DistributedConfig) -> str:
    return (
        f"process {topology.process_id}: not all {topology.num_processes} processes reached the "
        f"coordinator at {topology.coordinator_address} within {config.init_timeout_s} s (--init-timeout-s); "
        f"a rank did not start, or cannot reach that address"
    )


def _wait_for_coordinator(address: str, poll_s: float = 0.02) -> None:
    """Until process 0's coordination service accepts connections (our watchdog bounds the wait). A client
    that reaches for it earlier is refused and backs off for about a second in gRPC: every process then
    waited for it (two processes, one 0.5 s ahead of process 0: 1.1 s to initialize, then 0.5 s)."""
    host, port = address.rsplit(":", 1)
    while True:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=1.0).close()
            return
        except OSError:
            time.sleep(poll_s)


def _die(message: str) -> None:
    print(f"dali-launch: error: {message}", file=sys.stderr, flush=True)
    os._exit(3)


def local_devices(topology: Topology) -> list:
    """This process's devices for training: GPUs when there are any (and allowed), else CPU devices."""
    import jax

    devices = jax.local_devices(backend=topology.platform)
    count = topology.local_device_count or len(devices)
    if len(devices) < count:
        raise UsageError(
            f"process {topology.process_id} sees {len(devices)} {devices[0].platform} devices "
            f"but was planned for {count}; lower --gpus-per-node"
        )
    return devices[:count]


def job_devices(devices: list, process_index: int) -> list:
    """Every device the job trains on: this process's `devices` (`process_index`: its topology's) and every other
    process's. Other processes see only their own (jax.distributed's local_device_ids); a lone process may see
    more GPUs than it was given, and those are no part of the job."""
    import jax

    return [d for d in jax.devices(devices[0].platform) if d.process_index != process_index or d in devices]


def barrier(name: str, timeout_s: int) -> None:
    """Waits until every process arrives, or raises after `timeout_s`.

    multihost_utils.sync_global_devices has no timeout and would hang on a dead peer; the
    distributed client's barrier is the one with a bound (Orbax uses the same client).
    """
    import jax

    if jax.process_count() == 1:
        return
    from dali_launch.trainer.jax_private import distributed_client

    try:
        distributed_client().wait_at_barrier(name, timeout_in_ms=timeout_s * 1000)
    except Exception as e:  # XlaRuntimeError: DEADLINE_EXCEEDED, or a peer gone
        raise TimeoutError(
            f"process {jax.process_index()}: barrier '{name}' not reached by every process within {timeout_s} s ({e})"
        ) from e
