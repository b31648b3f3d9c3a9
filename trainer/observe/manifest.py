"""RUN_DIR/manifest.json: what ran, from which source, on what, where. Process 0 writes it at task start.

It holds the resolved task spec, package versions, the git revision of the source this package
runs from, the topology, SLURM's facts about the job, and the environment with every value whose
name looks secret redacted (so the file can be attached to a bug report). A requeued job writes it
again: the SLURM facts (restart count) are the newest start's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.run_dir import RunPaths, write_atomic
from dali_launch.trainer.topology import Topology, expand_hostlist

PACKAGES = ("dali-launch", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "submitit", "lmdb", "pillow")
FLAVOURED = ("nvidia-dali", "jax-cuda")  # every installed build: nvidia-dali-cuda120, jax-cuda12-plugin, ...
SLURM_FACTS = {
    "job_id": "SLURM_JOB_ID",
    "job_name": "SLURM_JOB_NAME",
    "nodelist": "SLURM_JOB_NODELIST",
    "num_nodes": "SLURM_JOB_NUM_NODES",
    "ntasks": "SLURM_NTASKS",
    "ntasks_per_node": "SLURM_NTASKS_PER_NODE",
    "cpus_per_task": "SLURM_CPUS_PER_TASK",
    "gpus_on_node": "SLURM_GPUS_ON_NODE",
    "partition": "SLURM_JOB_PARTITION",
    "account": "SLURM_JOB_ACCOUNT",
    "qos": "SLURM_JOB_QOS",
    "cluster": "SLURM_CLUSTER_NAME",
    "submit_host": "SLURM_SUBMIT_HOST",
    "submit_dir": "SLURM_SUBMIT_DIR",
    "restart_count": "SLURM_RESTART_COUNT",
    "array_job_id": "SLURM_ARRAY_JOB_ID",
    "array_task_id": "SLURM_ARRAY_TASK_ID",
}
# Names that look secret: AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY, HF_TOKEN, PGPASSWORD, SSHPASS, ...
# Over-matching (KEYBOARD, BYPASS) only hides a harmless value.
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASS|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)
URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")  # https://user:password@host/...
REDACTED = "<redacted>"
GIT_TIMEOUT_S = 10


def write_manifest(
    paths: RunPaths, spec: TaskSpec, topology: Topology, devices: list | None = None, env: dict[str, str] | None = None
) -> dict:
    """Writes manifest.json atomically; returns what it wrote. `devices`: this process's JAX devices."""
    env = dict(os.environ if env is None else env)
    manifest = {
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": dataclasses.asdict(spec),
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "packages": package_versions(),
        "source": git_revision(Path(__file__).resolve().parents[1]),  # the trainer package
        "topology": {**dataclasses.asdict(topology), "devices": [_device(d) for d in devices or []]},
        "slurm": slurm_facts(env),
        "environment": redacted(env),
    }
    write_atomic(paths.manifest, json.dumps(manifest, indent=2, sort_keys=True, default=str))
    return manifest


def package_versions() -> dict[str, str | None]:
    """Installed versions (None: not installed), with every DALI and JAX CUDA build that is installed. The
    builds are found by their `*.dist-info` folders' names: reading every installed package's metadata to find
    them took 32 ms of each task's start-up on the 2-core CPU machine, the folders' names under 1 ms."""
    versions = {name: _version(name) for name in PACKAGES}
    for name in _flavoured_builds():
        versions[name] = _version(name)
    return versions


def _flavoured_builds() -> set[str]:
    """The names of the installed FLAVOURED distributions (their dist-info folders say `name-version`, the name
    with `_` for `-`, any case)."""
    prefixes = tuple(prefix.replace("-", "_") for prefix in FLAVOURED)
    names = set()
    for entry in sys.path:
        with contextlib.suppress(OSError):
            for folder in os.listdir(entry or "."):
                lowered = folder.lower()
                if lowered.endswith(".dist-info") and lowered.startswith(prefixes):
                    names.add(lowered.removesuffix(".dist-info").rsplit("-", 1)[0].replace("_", "-"))
    return names


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_revision(source: Path) -> dict | None:
    """HEAD of the git checkout `source` belongs to and whether it has changes; None if it is not one.

    `source` must itself be tracked: an installed copy in site-packages inside some other
    repository is not a checkout of ours. Every call is bounded; git takes no locks (the user may
    be committing in that checkout at the same time).
    """

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-C", str(source), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
            stdin=subprocess.DEVNULL,
        )

    try:
        if git("ls-files", "--error-unmatch", "--", "__init__.py").returncode != 0:
            return None
        head, status = git("rev-parse", "--show-toplevel", "HEAD"), git("status", "--porcelain")
    except (OSError, subprocess.TimeoutExpired):  # no git here, or a hung file system
        return None
    if head.returncode != 0 or status.returncode != 0:
        return None
    checkout, revision = head.stdout.splitlines()[:2]
    return {"revision": revision, "dirty": bool(status.stdout.strip()), "checkout": checkout}


def slurm_facts(env: dict[str, str]) -> dict:
    """The job as SLURM describes it to this task; empty outside SLURM."""
    facts = {key: env[name] for key, name in SLURM_FACTS.items() if name in env}
    if "nodelist" in facts:
        facts["hosts"] = expand_hostlist(facts["nodelist"])
    return facts


def redacted(env: dict[str, str]) -> dict[str, str]:
    """The environment, with values of secret-looking names replaced and passwords cut out of URLs."""
    return {
        name: REDACTED if SECRET_NAME.search(name) else URL_USERINFO.sub(REDACTED + "@", value)
        for name, value in sorted(env.items())
    }


def _device(device) -> dict:
    return {
        "id": device.id,
        "platform": device.platform,
        "kind": getattr(device, "device_kind", None),
        "process_index": getattr(device, "process_index", None),
    }
