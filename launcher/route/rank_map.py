"""The planned rank map of a job: which node, task and devices each process gets.

Job device d is read by DALI shards d*R .. d*R+R-1 (R: --readers-per-device, which each task resolves
when it is auto); the tasks write the shards they read into rank_map.json.

The trainer computes the same shard ids from what JAX reports; tests hold the two to agreement.
"""

from __future__ import annotations

from dali_launch.launcher.run_config import RunConfig, counted


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
    return "\n".join(lines)


def readers_phrase(readers: int) -> str:
    """How many DALI readers (shards) each device has: the flag's value, or that each task resolves it."""
    if readers:
        return f"{counted(readers, 'DALI reader')} (shard) per device"
    return "DALI readers per device resolved by each task (--readers-per-device auto; rank_map.json records them)"
