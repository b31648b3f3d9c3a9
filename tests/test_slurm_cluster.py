"""Real multi-node SLURM on this host, from slurm/cluster.sh (needs root and Debian's slurm packages).

Self-contained: the session fixture brings a cluster up in a temporary directory whose path
contains a space, and takes it down at the end. Every subprocess call has a timeout.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "slurm" / "cluster.sh"
SBIN_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        shutil.which("slurmctld", path=SBIN_PATH) is None,
        reason="slurmctld not installed (apt-get install slurmctld slurmd slurm-client munge)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="slurm/cluster.sh runs slurmd and munged as root"),
]


def run(args, *, env=None, timeout=60.0, check=True, cwd="/tmp") -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} -> rc {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def cluster_sh(*args, timeout=90.0, check=True) -> subprocess.CompletedProcess:
    return run([SCRIPT, *args], timeout=timeout, check=check)


class Cluster:
    def __init__(self, path: Path):
        self.dir = path
        self.conf = path / "slurm.conf"
        # What `source DIR/env.sh` sets up.
        self.env = dict(os.environ, SLURM_CONF=str(self.conf), PATH=f"{path / 'bin'}:{SBIN_PATH}")

    def slurm(self, *args, timeout=60.0) -> str:
        return run(args, env=self.env, timeout=timeout).stdout

    def node_states(self) -> dict[str, str]:
        lines = self.slurm("sinfo", "-h", "-N", "-o", "%N %t", timeout=10).split("\n")
        return dict(line.split() for line in lines if line.strip())

    def wait_idle(self, nodes: int, timeout: float = 15.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if list(states.values()).count("idle") == nodes or time.monotonic() > deadline:
                return states
            time.sleep(0.2)

    def pid(self, name: str) -> int:
        return int((self.dir / "run" / f"{name}.pid").read_text())


def processes_of(cluster_dir: Path, marker: str | None = None) -> list[str]:
    """Live (non-zombie) daemons started with this DIR's slurm.conf, its slurmstepd's, and `marker` tasks."""
    conf = str(cluster_dir / "slurm.conf")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            comm = (proc / "comm").read_text().strip()
            fds = [os.readlink(fd) for fd in (proc / "fd").iterdir()] if comm == "slurmstepd" else []
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] in "ZX":
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if conf in args or any(fd.startswith(f"{cluster_dir}/") for fd in fds) or (marker and marker in " ".join(args)):
            found.append(f"{proc.name} {' '.join(args)}")
    return found


@pytest.fixture
def short_tmp():
    """A short directory with a space: slurmstepd's sockets under DIR must fit in 108 bytes,
    which pytest's deep tmp_path does not guarantee."""
    path = Path(tempfile.mkdtemp(prefix="dali slurm ", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    parent = Path(tempfile.mkdtemp(prefix="dali slurm ", dir="/tmp"))
    path = parent / "local cluster"
    try:
        out = cluster_sh("up", "--dir", path).stdout
        assert out.startswith("up in "), out
        yield Cluster(path)
    finally:
        cluster_sh("down", "--dir", path, check=False)
        shutil.rmtree(parent, ignore_errors=True)


def test_up_gives_idle_nodes(cluster):
    assert cluster.wait_idle(2) == {"node1": "idle", "node2": "idle"}
    status = cluster_sh("status", "--dir", cluster.dir)
    assert "2 nodes x 2 CPUs" in status.stdout
    assert 'SLURM_CONF="$_dali_slurm_dir/slurm.conf"' in (cluster.dir / "env.sh").read_text()


def test_srun_spans_two_nodes(cluster):
    out = cluster.slurm("srun", "-N2", "-n2", "printenv", "SLURMD_NODENAME")
    assert sorted(out.split()) == ["node1", "node2"]


def test_two_tasks_per_node(cluster):
    out = cluster.slurm(
        "srun",
        "-N2",
        "--ntasks-per-node",
        "2",
        "--cpus-per-task",
        "1",
        "--mem",
        "1G",
        "bash",
        "-c",
        'echo "$SLURMD_NODENAME $SLURM_PROCID"',
    )
    pairs = [line.split() for line in out.splitlines()]
    assert collections.Counter(node for node, _ in pairs) == {"node1": 2, "node2": 2}
    assert sorted(int(rank) for _, rank in pairs) == [0, 1, 2, 3]


def test_sbatch_runs_steps_on_both_nodes(cluster, tmp_path):
    out_file = tmp_path / "job out.txt"
    job_id = cluster.slurm(
        "sbatch",
        "--parsable",
        "--nodes",
        "2",
        "--ntasks-per-node",
        "1",
        "--output",
        out_file,
        "--wrap",
        "srun printenv SLURMD_NODENAME",
    ).strip()
    # Not `sbatch --wait`: it polls with a back-off and takes ~10 s for this 1 s job.
    deadline = time.monotonic() + 30
    while (state := cluster.slurm("squeue", "-h", "--states=all", "-j", job_id, "-o", "%T").strip()) in {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
    } and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state == "COMPLETED"
    assert sorted(out_file.read_text().split()) == ["node1", "node2"]


SUBMITIT_SCRIPT = """
import os, sys, time, submitit

def node_name():
    return os.environ["SLURMD_NODENAME"]

t0 = time.monotonic()
executor = submitit.AutoExecutor(folder=sys.argv[1])
executor.update_parameters(slurm_partition="debug", nodes=2, tasks_per_node=1, timeout_min=5)
job = executor.submit(node_name)
names, seconds = sorted(job.results()), time.monotonic() - t0
for _ in range(50):  # the result file can land before slurm marks the job COMPLETED
    state = job.get_info().get("State", "UNKNOWN")  # forces a (shimmed) sacct call
    if state not in ("RUNNING", "COMPLETING"):
        break
    time.sleep(0.2)
print(*names, f"{seconds:.2f}", state)
"""


def test_submitit_round_trip(cluster, tmp_path):
    pytest.importorskip("submitit")
    # A child process: node_name lives in __main__, so cloudpickle ships it by value.
    out = run(
        [sys.executable, "-c", SUBMITIT_SCRIPT, tmp_path / "submitit logs" / "%j"],
        env=cluster.env,
        timeout=120,
    )
    names_a, names_b, seconds, state = out.stdout.split()
    assert [names_a, names_b] == ["node1", "node2"]
    assert float(seconds) < 60
    assert state == "COMPLETED"  # answered by DIR/bin/sacct, since there is no slurmdbd
    assert "sacct error" not in out.stderr


def test_up_again_is_a_no_op(cluster):
    before = cluster.pid("slurmctld")
    out = cluster_sh("up", "--dir", cluster.dir).stdout
    assert out.startswith("already up"), out
    assert cluster.pid("slurmctld") == before
    mismatch = cluster_sh("up", "--dir", cluster.dir, "--nodes", "3", check=False)
    assert mismatch.returncode != 0 and "already up with 2 nodes" in mismatch.stderr


def test_second_cluster_restart_and_down(cluster, short_tmp):
    """A second cluster beside the session one: stale restart, then `down` kills everything it ran."""
    other = short_tmp / "second cluster"
    marker = f"sleep {4000 + os.getpid() % 1000}"  # finds the job's tasks in /proc
    try:
        cluster_sh("up", "--dir", other, "--nodes", "2")
        second = Cluster(other)
        assert second.wait_idle(2) == {"node1": "idle", "node2": "idle"}
        assert (other / "slurm.conf").read_text() != (cluster.dir / "slurm.conf").read_text()  # other ports

        # A dead slurmd makes it stale; `up` restarts it cleanly.
        os.kill(second.pid("slurmd-node2"), 9)
        assert cluster_sh("status", "--dir", other, check=False).returncode == 1
        assert "restarting" in cluster_sh("up", "--dir", other).stderr
        assert second.wait_idle(2) == {"node1": "idle", "node2": "idle"}

        # `down` must take a running multi-node job down with it.
        second.slurm("sbatch", "-N2", "-n2", "--output", "/dev/null", "--wrap", f"srun {marker}")

        def tasks():  # 2 x `srun sleep` in the batch script + 2 x `sleep` on the nodes
            return [p for p in processes_of(other, marker) if marker in p]

        deadline = time.monotonic() + 20
        while len(tasks()) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(tasks()) == 4, processes_of(other, marker)
    finally:
        down = cluster_sh("down", "--dir", other)
    assert down.stdout.startswith("down:"), down.stdout
    assert processes_of(other, marker) == []
    assert not other.exists()
    assert cluster_sh("down", "--dir", other).returncode == 0  # down when not up
    # The session cluster (and the munged it may share) is untouched.
    assert cluster.wait_idle(2) == {"node1": "idle", "node2": "idle"}
    assert cluster.slurm("srun", "-N2", "-n2", "hostname", timeout=30).count("\n") == 2


def test_refuses_foreign_directory(tmp_path):
    (tmp_path / "precious.txt").write_text("not a cluster")
    proc = cluster_sh("up", "--dir", tmp_path, check=False)
    assert proc.returncode != 0 and "was not made by" in proc.stderr
    assert cluster_sh("down", "--dir", tmp_path, check=False).returncode != 0
    assert (tmp_path / "precious.txt").exists()
