"""Shared fixtures: real data sets prepared once per session, and the CLI run as users run it."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import submitit  # noqa: F401 - see below

from dali_launch.launcher.data import datasets
from dali_launch.launcher.data.idx import load_split, prepare, read_idx, write_lmdb

# submitit's logger keeps the stream it finds at import: imported first inside a test, that is the
# test's captured output, which pytest closes after it, and the next test's set-up then fails on it.
pytest_plugins = ["catalogue"]  # the bad-input catalogue's fixtures, shared by its test files

# A shell that starts the suite in the background (`bash .ci/run &`) ignores SIGINT in it, and an ignored
# signal stays ignored across exec: every CLI the tests start would then ignore the Ctrl-C they send it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "dali_launch.launcher.cli"]
FASHION_IDX = Path("/usr/share/datasets/fashion-mnist")  # apt-get install dataset-fashion-mnist


@pytest.fixture(scope="session")
def mnist_lmdb(tmp_path_factory) -> Path:
    """The embedded MNIST sample (8,000 train / 2,000 test) as the launcher prepares it."""
    out = tmp_path_factory.mktemp("mnist") / "lmdb"
    prepare(datasets.EMBEDDED_IDX, out)
    return out


@pytest.fixture(scope="session")
def small_lmdb(tmp_path_factory) -> Path:
    """800 training / 200 test digits of the embedded sample: 8 steps of 2 x 50 a epoch, for tests
    that compare two programs' parameters, which rounding may part after many steps."""
    images, labels = load_split(datasets.EMBEDDED_IDX, "t10k")
    out = tmp_path_factory.mktemp("small") / "lmdb"
    for split, part in (("training", slice(0, 800)), ("testing", slice(800, 1000))):
        (out / split).mkdir(parents=True)
        write_lmdb(out / split, images[part], labels[part], quality=95)
    return out


@pytest.fixture(scope="session")
def synth_sets(tmp_path_factory) -> dict[str, Path]:
    """`data synth` sets of 4 classes, 210 training / 40 test images of ~50×37 (--image-scale 0.1),
    shards of 32: {format: data dir} for tfrecord, webdataset and folders, the same images in each."""
    from dali_launch.launcher.data.synth import SynthSpec, synth

    root = tmp_path_factory.mktemp("synth")
    for fmt in ("tfrecord", "webdataset", "folders"):
        synth(SynthSpec(root / fmt, fmt, classes=4, train=210, test=40, image_scale=0.1, shard_size=32, workers=1))
    return {fmt: root / fmt for fmt in ("tfrecord", "webdataset", "folders")}


@pytest.fixture(scope="session")
def segmentation_set(tmp_path_factory) -> Path:
    """`data synth --format segmentation`: 4 classes (the background and 3 of objects), 200 training / 40 test
    scenes of ~50×37 (--image-scale 0.1), shards of 64."""
    from dali_launch.launcher.data.synth import SynthSpec, synth

    out = tmp_path_factory.mktemp("segmentation") / "scenes"
    synth(SynthSpec(out, "segmentation", classes=4, train=200, test=40, image_scale=0.1, shard_size=64, workers=1))
    return out


@pytest.fixture(scope="session")
def audio_set(tmp_path_factory) -> Path:
    """`data synth --format audio`: 4 classes of rhythms, 200 training / 40 test sounds of 1-1.5 s at 16, 22.05
    and 32 kHz (every fifth in stereo), ~16 MB of WAVs."""
    from dali_launch.launcher.data.synth import SynthSpec, synth

    out = tmp_path_factory.mktemp("audio") / "sounds"
    synth(SynthSpec(out, "audio", classes=4, train=200, test=40, workers=1))
    return out


@pytest.fixture(scope="session")
def fashion_lmdb(tmp_path_factory) -> Path:
    """Full Fashion-MNIST (60,000 / 10,000). CI installs it; elsewhere its absence skips."""
    if not FASHION_IDX.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{FASHION_IDX} is missing; .ci/run must apt-get install dataset-fashion-mnist")
        pytest.skip(f"{FASHION_IDX} is missing; apt-get install dataset-fashion-mnist")
    out = tmp_path_factory.mktemp("fashion") / "lmdb"
    prepare(FASHION_IDX, out)
    return out


@pytest.fixture(scope="session")
def fashion_subset(tmp_path_factory) -> Path:
    """The first 6,000 training and 1,000 test images of Fashion-MNIST: real classes, for models too
    slow on two CPU cores for the whole set."""
    if not FASHION_IDX.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{FASHION_IDX} is missing; .ci/run must apt-get install dataset-fashion-mnist")
        pytest.skip(f"{FASHION_IDX} is missing; apt-get install dataset-fashion-mnist")
    out = tmp_path_factory.mktemp("fashion-subset") / "lmdb"
    for split, prefix, count in (("training", "train", 6000), ("testing", "t10k", 1000)):
        images, labels = load_split(FASHION_IDX, prefix)
        (out / split).mkdir(parents=True)
        write_lmdb(out / split, images[:count], labels[:count], quality=95)
    return out


def dali_launch(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in a fresh process, as a user runs it (each JAX run needs its own process). Past
    `timeout` the test fails with what it printed and, on the test cluster, what SLURM was doing."""
    env = {**os.environ, **(env or {})}
    try:
        return subprocess.run(
            [*CLI, *args], capture_output=True, cwd=REPO, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as e:
        printed = lambda out: (out.decode(errors="replace") if isinstance(out, bytes) else out or "")[-3000:]
        slurm = cluster_report(env) if "SLURM_CONF" in env else ""
        pytest.fail(
            f"dali-launch {' '.join(args)} ran past {timeout} s\nstdout:\n{printed(e.stdout)}\n"
            f"stderr:\n{printed(e.stderr)}\n{slurm}",
            pytrace=False,
        )


def cluster_report(env: dict) -> str:
    """What the test cluster is doing: its queue, its nodes, the end of its controller's log."""
    jobs = "%i %j %T %r %M %D %N"
    nodes = subprocess.run(["sinfo", "-N", "-h", "-o", "%N %T %E"], env=env, capture_output=True, text=True, timeout=30)
    log = Path(env["SLURM_CONF"]).parent / "log" / "slurmctld.log"
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
    return "\n".join([f"jobs ({jobs}):", squeue(env, fmt=jobs), "nodes:", nodes.stdout + nodes.stderr, str(log), *tail])


# --- a run in the background, to signal or kill while it trains --------------------------------------


def start(*args: str, env: dict | None = None, stdout=subprocess.PIPE) -> subprocess.Popen:
    """The CLI in the background, in its own session: its process group is its pid, so `reap` ends it and
    every process it started. stderr (and stdout, unless told) kept for the verdict."""
    return subprocess.Popen(
        [*CLI, *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def stop_when(proc: subprocess.Popen, ready, sig: int, after_s: float = 0, timeout_s: float = 120) -> str:
    """Once `ready()` (and `after_s` more), `sig` to the launcher; its stderr once it ended. Reaped either way."""
    try:
        wait_for(ready, timeout_s=120)
        time.sleep(after_s)
        proc.send_signal(sig)
        return proc.communicate(timeout=timeout_s)[1]
    finally:
        reap(proc)


def kill_when(proc: subprocess.Popen, ready, timeout_s: float, poll_s: float = 0.001) -> None:
    """SIGKILL a `start`ed run's process group the moment `ready()` holds (or it ended, or `timeout_s` passed),
    and reap it: a death at a chosen instant, mid-checkpoint say."""
    try:
        deadline = time.monotonic() + timeout_s
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(poll_s)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        reap(proc)


def reap(proc: subprocess.Popen, pids=()) -> None:
    """Whatever of a `start`ed run still lives: its process group, then `pids` (ranks out of the group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc (each thread lists the children it started)."""
    children = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            children |= {int(c) for c in f.read().split()}
    return children.union(*(descendants(c) for c in children)) if children else children


def alive(pid: int) -> bool:
    """The process runs (or is stopped); a zombie waiting for its parent is dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(probe, timeout_s: float):
    """Polls `probe` until it returns something true, and returns that; raises after `timeout_s`."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"not true within {timeout_s} s")


@pytest.fixture(scope="session", autouse=True)
def _one_compile_cache(tmp_path_factory):
    """Every run of the session shares one XLA compile cache, as they shared the user's before it moved into
    each run root: the suite's runs compile the same programs again and again. Tests of the default unset it."""
    from dali_launch.trainer import compile_cache

    os.environ[compile_cache.ENV] = str(tmp_path_factory.mktemp("compile-cache"))
    yield


@pytest.fixture(scope="module")
def small_idx(tmp_path_factory):
    """250 training and 70 test digits of the embedded set: sizes no batch or shard count divides."""
    out = tmp_path_factory.mktemp("small-idx")
    images = read_idx(datasets.EMBEDDED_IDX / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(datasets.EMBEDDED_IDX / "t10k-labels-idx1-ubyte.gz")
    for prefix, part in (("train", slice(0, 250)), ("t10k", slice(250, 320))):
        write_idx(out / f"{prefix}-images-idx3-ubyte.gz", images[part])
        write_idx(out / f"{prefix}-labels-idx1-ubyte.gz", labels[part])
    return out, labels[:250], labels[250:320]


def write_idx(path: Path, array) -> None:
    """An MNIST-format IDX file of a uint8 array (gzipped if the name ends in .gz)."""
    import gzip

    header = b"\x00\x00\x08" + bytes([array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    data = header + array.tobytes()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def check_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )


SLURM_SCRIPT = REPO / "slurm" / "cluster.sh"


def squeue(env: dict, job_id: str | None = None, fmt: str = "%T", states: str = "all") -> str:
    """squeue's fields for a job of the test cluster, or for all its jobs in `states` (ended ones too
    by default: it keeps them for MinJobAge)."""
    argv = ["squeue", "-h", f"--states={states}", "-o", fmt, *(["-j", job_id] if job_id else [])]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30).stdout.strip()


ACTIVE_STATES = "PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED,REQUEUED,REQUEUE_HOLD,RESIZING"


@pytest.fixture(autouse=True)
def _slurm_queue_drained(request):
    """After a SLURM test the two nodes are free for the next: jobs still queued or running 30 s after
    the test (none should be: a job of ours ends with its run) are cancelled, with a warning naming them."""
    yield
    if "slurm_env" not in request.fixturenames:
        return
    env = {**os.environ, **request.getfixturevalue("slurm_env")}
    active = lambda: squeue(env, fmt="%i", states=ACTIVE_STATES).split()
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: not active(), timeout_s=30)
    left = active()
    if left:
        subprocess.run(["scancel", *left], env=env, capture_output=True, timeout=30)
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: not active(), timeout_s=60)
        warnings.warn(f"{request.node.name} left SLURM jobs {left} behind; cancelled", stacklevel=1)


@pytest.fixture(scope="session")
def slurm_env() -> dict:
    """The environment that points SLURM's clients at the local test cluster.

    CI starts the cluster (DALI_LAUNCH_SLURM_DIR); elsewhere this brings one up and down again.
    """
    import shutil

    if shutil.which("slurmctld", path=os.environ["PATH"] + ":/usr/sbin") is None or os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("SLURM tests need root and Debian's slurmctld slurmd slurm-client munge")
        pytest.skip("needs root and Debian's slurmctld slurmd slurm-client munge")
    given = os.environ.get("DALI_LAUNCH_SLURM_DIR")
    cluster = Path(given or "/tmp/dali-launch-test-slurm")
    subprocess.run(
        ["bash", str(SLURM_SCRIPT), "up", "--nodes", "2", "--cpus-per-node", "2", "--dir", str(cluster)],
        check=True,
        timeout=120,
        capture_output=True,
    )
    yield {"SLURM_CONF": str(cluster / "slurm.conf"), "PATH": f"{cluster / 'bin'}:{os.environ['PATH']}"}
    if not given:
        subprocess.run(["bash", str(SLURM_SCRIPT), "down", "--dir", str(cluster)], timeout=120, capture_output=True)


@contextlib.contextmanager
def mounted_tmpfs(mount: Path, size: str):
    """A tmpfs of `size` (mount's -o size=) at `mount`, unmounted after; root only, else the test skips."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True, timeout=30)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 44 MiB tmpfs for a run root: the MLP's checkpoints are ~18 MB, so the third does not fit."""
    with mounted_tmpfs(tmp_path / "tmpfs", "44m") as mount:
        yield mount


@pytest.fixture(scope="session")
def video_set(tmp_path_factory) -> Path:
    """`data synth --format video`: 6 classes (the cyclic orders of 4 colours), 192 training / 48 test VP9 clips
    of 12 frames of 16×16 (--image-scale 0.25)."""
    from dali_launch.launcher.data.synth import SynthSpec, synth

    out = tmp_path_factory.mktemp("video") / "clips"
    synth(SynthSpec(out, "video", classes=6, train=192, test=48, image_scale=0.25, shard_size=96, workers=1))
    return out


GPU_STANDIN = REPO / "tests" / "gpu_standin"  # the stand-in for DALI's GPU outputs, and its sitecustomize.py


@pytest.fixture
def gpu_outputs(monkeypatch) -> None:
    """Every pipeline's outputs in this process stand-in GPU ones (tests/gpu_standin/gpu_outputs.py), and taken
    for such; what the stand-in saw: `gpu_outputs.counts`."""
    from gpu_standin import gpu_outputs
    from nvidia.dali.pipeline import Pipeline

    from dali_launch.trainer.data import dali_outputs

    monkeypatch.setattr(gpu_outputs, "counts", collections.Counter())
    monkeypatch.setattr(Pipeline, "run", gpu_outputs.wrapped_run(Pipeline.run))
    monkeypatch.setattr(dali_outputs, "GPU_TYPES", dali_outputs.GPU_TYPES)
    gpu_outputs.extend(dali_outputs)


@pytest.fixture
def gpu_runs(tmp_path) -> dict:
    """The environment in which the processes a test starts (runs, their tasks, the Python API's followers) make
    every pipeline's outputs stand-in GPU ones, tests/ importable too; `standin_counts` of it: what they saw."""
    (tmp_path / "standin-counts").mkdir()
    path = os.pathsep.join(p for p in (str(GPU_STANDIN), str(REPO / "tests"), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, "GPU_STANDIN_COUNTS": str(tmp_path / "standin-counts")}


def standin_counts(env: dict) -> dict:
    """What the stand-in saw in the processes started with `env` (gpu_runs'), summed."""
    total = collections.Counter()
    for path in Path(env["GPU_STANDIN_COUNTS"]).glob("process-*.json"):
        total.update(json.loads(path.read_text()))
    return dict(total)
