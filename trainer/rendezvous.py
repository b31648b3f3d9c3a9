"""Where the job's processes meet: the port of process 0's coordinator, chosen by it and told to the others.

jax.distributed's coordination service listens in process 0 at a port every task could derive (SLURM: from
the job id, topology.coordinator_port; local mode: the launcher's pick). Another program may hold that port
on process 0's host (or another job whose id gives the same one): JAX then failed with "Failed to start RPC
server" in a page of traceback naming no port, and the others knocked at a port that was not ours. So
process 0 takes the first free port from the derived one on (PORT_TRIES of them), says so when it is not
the derived one, and writes where it listens into the run directory (`coordinator.json`, marked with this
start of the job); the others read it there -- every rank of a job shares its run directory -- within
--init-timeout-s, one small file polled, instead of deriving it.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import socket
import time

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, write_atomic
from dali_launch.trainer.topology import LAUNCHED_AT, SLURM_ENV, Topology

PORT_TRIES = 16  # the derived port and the next 15
POLL_S = 0.1
# JAX's words when its coordination service cannot listen: the port was taken after our probe
TAKEN = "Failed to start RPC server"


def this_start(env) -> str:
    """What tells this start of the job from an earlier one in the same run directory (a resume, a requeue):
    local mode's launch time; SLURM's job, step and restart count."""
    if LAUNCHED_AT in env:
        return env[LAUNCHED_AT]
    return ".".join(env.get(SLURM_ENV[key], "") for key in ("job_id", "step_id", "restart_count"))


def settle(topology: Topology, paths: RunPaths, env=None) -> Topology:
    """The topology with the address the coordinator listens at: process 0 chooses and writes it, the others
    wait for it (the caller bounds the wait: topology.initialize's deadline)."""
    if topology.coordinator_address is None:
        return topology
    start = this_start(os.environ if env is None else env)
    host, port = topology.coordinator_address.rsplit(":", 1)
    if topology.process_id == 0:
        chosen = first_free(int(port), topology)
        if chosen != int(port):
            print(f"dali-launch: port {port} on {topology.host} is taken; the coordinator listens on {chosen}")
        address = f"{host}:{chosen}"
        write_atomic(paths.coordinator, json.dumps({"address": address, "start": start}))
    else:
        address = _published(paths, start)
    return dataclasses.replace(topology, coordinator_address=address)


def first_free(port: int, topology: Topology) -> int:
    """The first port from `port` on that this host lets a server listen on, as the coordination service does
    (every address, IPv6 and IPv4; a port left in TIME_WAIT is free); one line when none is."""
    for candidate in range(port, port + PORT_TRIES):
        if _can_listen(candidate):
            return candidate
    raise UsageError(
        f"ports {port}-{port + PORT_TRIES - 1} on {topology.host}, where process 0's coordinator listens, are "
        f"all taken ({derived_from(topology)}); free one of them (`ss -ltnp 'sport = :{port}'` names its holder), "
        f"or start the job again"
    )


def derived_from(topology: Topology) -> str:
    return f"derived from job id {topology.job_id}" if topology.job_id else "picked by the launcher"


def _can_listen(port: int) -> bool:
    try:
        probe, address = socket.socket(socket.AF_INET6, socket.SOCK_STREAM), "::"
        probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # one bind covers IPv4 too
    except OSError:  # no IPv6 on this host
        probe, address = socket.socket(socket.AF_INET, socket.SOCK_STREAM), "0.0.0.0"
    with probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
            probe.listen(1)
        except OSError as e:
            return e.errno == errno.EADDRNOTAVAIL and address == "::" and _can_listen_ipv4(port)
    return True


def _can_listen_ipv4(port: int) -> bool:
    """Where IPv6 is switched off (its any-address is not available)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
            probe.listen(1)
        except OSError:
            return False
    return True


def _published(paths: RunPaths, start: str) -> str:
    """The address process 0 wrote for this start of the job, once it is there."""
    while True:
        try:
            said = json.loads(paths.coordinator.read_text())
            if said["start"] == start:
                return said["address"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(POLL_S)


def taken_after_probe(error: Exception, topology: Topology) -> UsageError | None:
    """JAX's failure to listen, as one line naming the port (another program took it after our probe)."""
    if TAKEN not in str(error):
        return None
    port = topology.coordinator_address.rsplit(":", 1)[1]
    return UsageError(
        f"process 0's coordinator could not listen on port {port} of {topology.host} ({derived_from(topology)}; "
        f"another program took it as the job started); start the job again"
    )
