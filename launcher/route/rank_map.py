"""The planned rank map of a job: which node, task and devices each process gets.

Job device d is read by DALI shards d*R .. d*R+R-1 (R: --readers-per-device, which each task resolves
when it is auto); the tasks write the shards they read into rank_map.json.

The trainer computes the same shard ids from what JAX reports; tests hold the two to agreement.
"""

from __future__ import annotations

from dali_launch.launcher.run_config import RunConfig, counted
from dali_launch.trainer.plan import mesh as meshes

SHOWN_GROUPS = 4  # a mesh's groups listed in a dry run; the rest counted


def rank_map(run: RunConfig) -> list[dict]:
    rows, per_process = [], run.devices_per_process
    for process_id in range(run.num_processes):
        node, task = divmod(process_id, run.tasks_per_node)
        first = process_id * per_process
        rows.append(
            {
                "process_id": process_id,
                "node": node,
                "local_rank": task,
                "local_devices": list(range(task * per_process, (task + 1) * per_process)),
                "device_indices": list(range(first, first + per_process)),
                "num_devices": run.num_devices,
            }
        )
    return rows


def describe(run: RunConfig) -> str:
    """The rank map; for a node range, SLURM's pick at each start, then the map at the most nodes."""
    low, high = run.node_range
    lines = [] if low == high else [f"nodes {low}-{high}: SLURM picks the count at each start; at {high} nodes:"]
    lines.append(
        f"{counted(run.num_processes, 'process')} on {counted(run.nodes, 'node')}, "
        f"{counted(run.devices_per_process, 'device')} each, {counted(run.num_devices, 'device')} in all, "
        f"{readers_phrase(run.data.readers_per_device)}"
    )
    for r in rank_map(run):
        lines.append(
            f"  process {r['process_id']}: node {r['node']} task {r['local_rank']} "
            f"devices {r['local_devices']}, job devices {r['device_indices']}"
        )
    return "\n".join([*lines, *mesh_lines(run)])


def mesh_lines(run: RunConfig) -> list[str]:
    """How --mesh lies on the nodes: its tensor and fsdp groups of job devices (step/shardings.device_grid's order:
    device ((a × fsdp) + f) × tensor + t), each with the nodes it spans: a group across nodes gathers over the
    network at every step."""
    if run.step.mesh == "auto":
        return [
            f"--mesh auto: data parallel over the {run.num_devices} devices, the state whole on each, unless it does "
            "not fit a device: each task then shards it (rank_map.json records the mesh)"
        ]
    mesh = meshes.for_job(run.step.mesh, run.num_devices)
    if not mesh.shards_state:
        return [f"--mesh {mesh}: the state whole on every device"]
    at = lambda a, f, t: (a * mesh.fsdp + f) * mesh.tensor + t
    grid = [(a, f, t) for a in range(mesh.data) for f in range(mesh.fsdp) for t in range(mesh.tensor)]
    tensor = [[at(a, f, t) for t in range(mesh.tensor)] for a, f, t in grid if t == 0]
    fsdp = [[at(a, f, t) for f in range(mesh.fsdp)] for a, f, t in grid if f == 0]
    lines = [
        f"--mesh {mesh}: the state split over each group below, one copy per data group ({counted(mesh.data, 'data group')})"
    ]
    for axis, groups in (("tensor", tensor), ("fsdp", fsdp)):
        if len(groups[0]) > 1:
            lines += [f"  {axis} group: job devices {group} on {_nodes(run, group)}" for group in groups[:SHOWN_GROUPS]]
            lines += [f"  ... {len(groups) - SHOWN_GROUPS} more {axis} groups"] if len(groups) > SHOWN_GROUPS else []
    return lines


def _nodes(run: RunConfig, devices: list[int]) -> str:
    nodes = sorted({d // run.devices_per_process // run.tasks_per_node for d in devices})
    return f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {', '.join(map(str, nodes))} (over the network)"


def readers_phrase(readers: int) -> str:
    """How many DALI readers (shards) each device has: the flag's value, or that each task resolves it."""
    if readers:
        return f"{counted(readers, 'DALI reader')} (shard) per device"
    return "DALI readers per device resolved by each task (--readers-per-device auto; rank_map.json records them)"
