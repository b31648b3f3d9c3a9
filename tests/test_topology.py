"""Topology from the launcher's and SLURM's variables, for both task layouts; the planned rank map."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys

import pytest

from dali_launch.launcher.route import rank_map
from dali_launch.launcher.run_config import LaunchConfig, RunConfig
from dali_launch.trainer import rendezvous
from dali_launch.trainer.config import Layout
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import (
    coordinator_port,
    expand_hostlist,
    from_environment,
)


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("node1", ["node1"]),
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("gpu[8-10],login1", ["gpu8", "gpu9", "gpu10", "login1"]),
        ("a[1-2],b[09-10]", ["a1", "a2", "b09", "b10"]),
    ],
)
def test_hostlists(nodelist, hosts):
    assert expand_hostlist(nodelist) == hosts


def _slurm(procid, localid, ntasks, per_node, nodelist="node[01-03,07]", **extra):
    return {
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(localid),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NTASKS_PER_NODE": per_node,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_JOB_ID": "4242",
        **extra,
    }


def test_slurm_one_task_per_node_sees_all_gpus():
    config = Layout(backend="slurm", num_processes=4, local_device_count=8)
    t = from_environment(config, "gpu", _slurm(procid=2, localid=0, ntasks=4, per_node="1"))
    assert (t.process_id, t.num_processes, t.local_device_ids) == (2, 4, tuple(range(8)))
    assert t.coordinator_address == f"node01:{coordinator_port('4242')}"


def test_slurm_one_task_per_gpu_takes_its_slice():
    config = Layout(backend="slurm", num_processes=32, local_device_count=1)
    t = from_environment(config, "gpu", _slurm(procid=13, localid=5, ntasks=32, per_node="8(x4)"))
    assert (t.process_id, t.local_device_ids) == (13, (5,))
    bound = _slurm(procid=13, localid=5, ntasks=32, per_node="8(x4)", CUDA_VISIBLE_DEVICES="5")
    assert from_environment(config, "gpu", bound).local_device_ids == (0,)  # --gpu-bind left it one GPU


def test_a_step_on_part_of_the_allocation_coordinates_on_its_own_first_node():
    """`srun -N2` inside an salloc of 4 nodes: process 0 sits on the step's first node, not the job's."""
    config = Layout(backend="slurm", num_processes=2, local_device_count=1)
    step = _slurm(procid=1, localid=0, ntasks=2, per_node="1", SLURM_STEP_NODELIST="node[03,07]")
    t = from_environment(config, "cpu", step)
    assert t.coordinator_address == f"node03:{coordinator_port('4242')}"


def test_the_launcher_names_the_table_not_whichever_variables_exist():
    """Local mode started inside an salloc, and `train` inside one, ignore SLURM's variables."""
    env = {
        **_slurm(0, 0, 2, "2"),
        "DALI_LAUNCH_PROCESS_ID": "1",
        "DALI_LAUNCH_NUM_PROCESSES": "2",
        "DALI_LAUNCH_LOCAL_RANK": "1",
        "DALI_LAUNCH_COORDINATOR": "127.0.0.1:1234",
    }
    local = Layout(backend="local", num_processes=2, local_device_count=2)
    t = from_environment(local, "cpu", env)
    assert (t.process_id, t.coordinator_address, t.local_device_ids, t.platform) == (1, "127.0.0.1:1234", None, "cpu")
    alone = from_environment(Layout(), "cpu", env)
    assert (alone.process_id, alone.num_processes, alone.coordinator_address) == (0, 1, None)


def test_planned_rank_map_matches_trainer_shards():
    run = RunConfig(launch=LaunchConfig(nodes=2, gpus_per_node=4, tasks_per_node=2))
    rows = rank_map.rank_map(run)
    assert [r["device_indices"] for r in rows] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [(r["node"], r["local_rank"], r["local_devices"]) for r in rows] == [
        (0, 0, [0, 1]),
        (0, 1, [2, 3]),
        (1, 0, [0, 1]),
        (1, 1, [2, 3]),
    ]
    assert all(r["num_devices"] == 8 for r in rows)


def test_a_lone_process_given_fewer_devices_than_it_sees_trains_on_those_alone():
    """One process given 1 of the 2 devices it sees (--gpus-per-node 1 on a 2-GPU node): the job's
    mesh is that one device, not every device JAX lists."""
    code = (
        "import jax; from dali_launch.trainer.topology import job_devices; d = jax.devices(); "
        "print(len(d), len(job_devices(d[:1], 0)), len(job_devices(d, 0)))"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["2", "1", "2"], out.stderr


def test_slurm_job_facts_come_from_the_table_and_only_for_slurm_tasks():
    """The job id and restart count a task would requeue or cancel: a SLURM task's own; a `train` run
    inside an salloc (backend train) knows no job, so it never requeues or cancels the salloc."""
    env = _slurm(procid=0, localid=0, ntasks=2, per_node="1", SLURM_RESTART_COUNT="2")
    slurm = from_environment(Layout(backend="slurm", num_processes=2, local_device_count=1), "cpu", env)
    assert (slurm.job_id, slurm.restart_count) == ("4242", 2)
    here = from_environment(Layout(backend="train", local_device_count=1), "cpu", env)
    assert (here.job_id, here.restart_count) == (None, 0)


def test_process_0_passes_over_taken_ports_and_names_them_when_all_are(tmp_path):
    """Real sockets hold ports where process 0's coordinator would listen: it takes the next free one and
    writes it for the others, who read it for this start of the job only; with every port of its range
    held, one line names them and the fix."""
    env = _slurm(procid=0, localid=0, ntasks=2, per_node="1", SLURMD_NODENAME="node01", SLURM_STEP_ID="0")
    config = Layout(backend="slurm", num_processes=2, local_device_count=1)
    first, paths = from_environment(config, "cpu", env), RunPaths(tmp_path)
    port = int(first.coordinator_address.rsplit(":", 1)[1])
    with contextlib.ExitStack() as held:
        for taken in range(port, port + rendezvous.PORT_TRIES):
            if taken == port + 2:
                continue
            holder = held.enter_context(socket.socket())
            holder.bind(("127.0.0.1", taken))  # loopback alone still takes the port from the any-address
            holder.listen(1)
        met = rendezvous.settle(first, paths, env)
        assert met.coordinator_address == f"node01:{port + 2}"
        other = from_environment(config, "cpu", {**env, "SLURM_PROCID": "1"})
        assert rendezvous.settle(other, paths, env).coordinator_address == f"node01:{port + 2}"
        holder = held.enter_context(socket.socket())
        holder.bind(("0.0.0.0", port + 2))
        holder.listen(1)
        with pytest.raises(UsageError) as refused:
            rendezvous.settle(first, paths, env)
    assert str(refused.value) == (
        f"ports {port}-{port + 15} on node01, where process 0's coordinator listens, are all taken (derived from "
        f"job id 4242); free one of them (`ss -ltnp 'sport = :{port}'` names its holder), or start the job again"
    )
