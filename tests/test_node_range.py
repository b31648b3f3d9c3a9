"""--nodes MIN-MAX on the real SLURM cluster: a job in the default sample order starts on 2 nodes, is
preempted mid-epoch while one node is drained, comes back on the 1 node left (the rest of the epoch read
by both old pipelines there), and finishes with each training sample seen once per epoch, the elastic
decision printed and in RUN/elastic.jsonl. The refusals are in the catalogue."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest
from conftest import reap, squeue, start, wait_for
from run_readers import has_checkpoint, only_run, rank_report, seen_prints

# Each step of the first start waits a little, so the job is still mid-epoch when the test preempts it (the
# requeued start, once the first has ended and the test removed the marker file, runs at full speed). On CPU
# devices the trainer acts on a signal only at sync points (every --sync-every-steps device calls, default
# 10): an epoch here is 8 calls, so the test checks at every call, or the signal waits for an epoch's end.
SLOW = """
import os
import time

import flax.linen as nn
import jax


class Small(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        jax.debug.callback(lambda _: os.path.exists(MARKER) and time.sleep(1.5), x[0, 0])
        x = nn.relu(nn.Dense(64)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.num_classes)(x)


def small(num_classes):
    return Small(num_classes=num_classes)
"""


def _scontrol(env: dict, *args: str) -> None:
    subprocess.run(["scontrol", *args], env=env, check=True, timeout=30, capture_output=True)


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_requeue_with_fewer_nodes_continues_each_sample_once(slurm_env, small_lmdb, tmp_path):
    (tmp_path / "pkg").mkdir()
    marker = tmp_path / "slow-steps"
    marker.touch()
    (tmp_path / "pkg" / "slow.py").write_text(textwrap.dedent(SLOW) + f"\nMARKER = {str(marker)!r}\n")
    env = {**os.environ, **slurm_env, "PYTHONPATH": str(tmp_path / "pkg")}
    args = ["--nodes", "1-2", "--gpus-per-node", "1", "--platform", "cpu", "--time-min", "15", "--epochs", "2"]
    args += ["--global-batch-size", "100", "--record-samples", "--model", "slow:small"]
    args += ["--sync-every-steps", "1", "--checkpoint-every-steps", "1"]  # a sync point at every call
    args += ["--data-dir", str(small_lmdb), "--run-root", str(tmp_path / "runs")]
    proc, job_id, drained = start(*args, env=env), None, False
    try:
        wait_for(lambda: rank_report(tmp_path / "runs", 1), timeout_s=120)  # SLURM gave both nodes
        wait_for(lambda: has_checkpoint(tmp_path / "runs"), timeout_s=120)
        paths = only_run(tmp_path / "runs")
        first = wait_for(lambda: paths.rank_map.exists() and json.loads(paths.rank_map.read_text()), timeout_s=60)
        job_id = json.loads((paths.root / "job.json").read_text())["job_id"]
        _scontrol(env, "update", "NodeName=node2", "State=DRAIN", "Reason=test_node_range")
        drained = True
        subprocess.run(["scancel", "--signal=USR2", job_id], env=env, check=True, timeout=30)
        # SLURM holds a requeued batch job back ~2 minutes (its credential lifetime): let it start now
        wait_for(lambda: squeue(env, job_id) == "PENDING", timeout_s=180)
        marker.unlink()  # the first start has ended: the requeued one need not wait
        _scontrol(env, "update", f"JobId={job_id}", "StartTime=now")
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None and job_id:  # frees the nodes for the next test
            subprocess.run(["scancel", job_id], env=env, timeout=30)
        if drained:
            _scontrol(env, "update", "NodeName=node2", "State=RESUME")
        reap(proc)
    assert proc.returncode == 0, err
    assert "requeued (1/3)" in out and "elastic resume: 2 -> 1 devices, global batch 100 kept" in out, out
    assert [(r["num_processes"], r["num_nodes"]) for r in first] == [(2, 2), (2, 2)]  # the first start: 2 nodes
    ranks = json.loads(paths.rank_map.read_text())
    assert [(r["num_processes"], r["num_nodes"]) for r in ranks] == [(1, 1)]
    (record,) = [json.loads(line) for line in paths.elastic.read_text().splitlines()]
    assert (record["devices_before"], record["devices"], record["batch_per_device_step"]) == (2, 1, 100)
    assert (record["rule"], record["global_batch"], record["remainder"]["slots"]) == ("keep", 100, 2), record
    assert 0 < record["position"] < 800 and record["position"] % 100 == 0, record  # mid-epoch, whole steps
    assert json.loads(paths.result.read_text())  # the run completed
    for epoch in range(2):
        prints = seen_prints(paths, epoch)
        assert sum(prints.values()) == 800 and max(prints.values()) == 1, epoch  # none lost, none repeated
