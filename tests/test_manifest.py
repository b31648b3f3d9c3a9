"""trainer/observe/manifest.py: the run manifest, written for real from this checkout and this environment."""

from __future__ import annotations

import json
import platform
import subprocess
from importlib import metadata

from conftest import REPO

from dali_launch.trainer.config import DistributedConfig, Layout, TaskSpec
from dali_launch.trainer.observe.manifest import REDACTED, git_revision, package_versions, write_manifest
from dali_launch.trainer.run_dir import RunPaths
from dali_launch.trainer.topology import from_environment

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "aws-s3cr3t",
    "OPENAI_API_KEY": "sk-live-123",
    "hf_token": "hf_abc",
    "PGPASSWORD": "pg-pw",
    "GITHUB_TOKEN": "ghp_xyz",
    "MY_SERVICE_Secret": "shh",
    "SSHPASS": "ssh-pw",
}
SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_JOB_PARTITION": "debug",
    "SLURM_RESTART_COUNT": "1",
    "SLURMD_NODENAME": "node1",
}


def _git(*args: str, cwd=REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=30).stdout


def test_manifest_of_a_slurm_task(tmp_path, monkeypatch):
    import jax

    for name, value in {
        **SECRETS,
        **SLURM,
        "PIP_INDEX_URL": "https://me:pip-pw@pypi.example/simple",
        "DALI_LAUNCH_NOTE": "kept as is",
    }.items():
        monkeypatch.setenv(name, value)
    spec = TaskSpec(
        run_dir=str(tmp_path),
        distributed=DistributedConfig(platform="cpu"),
        layout=Layout(backend="slurm", num_processes=2, local_device_count=1),
    )
    topology = from_environment(spec.layout, spec.distributed.platform)
    paths = RunPaths(tmp_path)

    written = write_manifest(paths, spec, topology, jax.local_devices(backend="cpu")[:1])
    text = paths.manifest.read_text()
    manifest = json.loads(text)
    assert manifest == json.loads(json.dumps(written, default=str))
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # written atomically, no temporary left

    env = manifest["environment"]
    assert all(env[name] == REDACTED for name in SECRETS)
    assert not any(secret in text for secret in [*SECRETS.values(), "pip-pw"])
    assert env["PIP_INDEX_URL"] == f"https://{REDACTED}@pypi.example/simple"
    assert env["DALI_LAUNCH_NOTE"] == "kept as is" and env["SLURM_JOB_ID"] == "4242"

    assert manifest["config"] == json.loads(spec.to_json())
    packages = manifest["packages"]
    for name in ("jax", "jaxlib", "flax", "optax", "numpy", "submitit"):
        assert packages[name] == metadata.version(name)
    assert any(name.startswith("nvidia-dali-") and version for name, version in packages.items())
    assert manifest["python"]["version"] == platform.python_version()

    source = manifest["source"]
    assert source["revision"] == _git("rev-parse", "HEAD").strip()
    assert source["dirty"] == bool(_git("status", "--porcelain").strip())

    assert manifest["topology"]["process_id"] == 0 and manifest["topology"]["num_processes"] == 2
    assert manifest["topology"]["host"] == "node1" and manifest["topology"]["coordinator_address"] == "node1:61586"
    assert [d["platform"] for d in manifest["topology"]["devices"]] == ["cpu"]
    assert manifest["slurm"] == {
        "job_id": "4242",
        "nodelist": "node[1-2]",
        "hosts": ["node1", "node2"],
        "ntasks": "2",
        "partition": "debug",
        "restart_count": "1",
    }


def test_every_installed_cuda_build_is_listed_with_its_version(tmp_path, monkeypatch):
    """The DALI and JAX CUDA builds are found by their dist-info folders (any case, `_` for `-`), each with the
    version its metadata says; nothing else from that folder is listed."""
    for folder, name in (("jax_cuda13_plugin-0.11.2", "jax-cuda13-plugin"), ("NVIDIA_DALI_CUDA130-2.5.0", None)):
        info = tmp_path / f"{folder}.dist-info"
        info.mkdir()
        version = folder.rsplit("-", 1)[1]
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name or 'nvidia-dali-cuda130'}\nVersion: {version}\n"
        )
    (tmp_path / "requests-2.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    packages = package_versions()
    assert packages["jax-cuda13-plugin"] == "0.11.2" and packages["nvidia-dali-cuda130"] == "2.5.0", packages
    assert "requests" not in packages and packages["jax"] == metadata.version("jax")


def test_manifest_outside_slurm_has_no_slurm_facts(tmp_path, monkeypatch):
    for name in list(SLURM):
        monkeypatch.delenv(name, raising=False)
    spec = TaskSpec(run_dir=str(tmp_path))
    manifest = write_manifest(
        RunPaths(tmp_path), spec, from_environment(spec.layout, spec.distributed.platform), env={"HOME": "/home/u"}
    )
    assert manifest["slurm"] == {} and manifest["environment"] == {"HOME": "/home/u"}
    assert manifest["topology"]["num_processes"] == 1 and manifest["topology"]["devices"] == []


def test_git_revision_only_of_a_checkout_that_tracks_the_package(tmp_path):
    assert git_revision(tmp_path) is None  # not a checkout at all
    repo = tmp_path / "repo"
    package = repo / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    _git("init", "-q", cwd=repo)
    assert git_revision(package) is None  # inside a checkout, but not tracked by it (site-packages in a repo)
    _git("add", "pkg/__init__.py", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one", cwd=repo)
    assert git_revision(package) == {
        "revision": _git("rev-parse", "HEAD", cwd=repo).strip(),
        "dirty": False,
        "checkout": str(repo),
    }
    (package / "__init__.py").write_text("x = 1\n")
    assert git_revision(package)["dirty"] is True


def test_every_folder_of_modules_is_a_package_the_wheel_ships():
    """A non-editable install (a wheel on cluster nodes) ships the packages pyproject.toml lists, only them."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {f.parent.relative_to(REPO) for top in ("launcher", "trainer") for f in (REPO / top).rglob("*.py")}
    assert {"dali_launch", *("dali_launch." + ".".join(folder.parts) for folder in folders)} == listed
    assert all((REPO / folder / "__init__.py").exists() for folder in [*folders, "dali_launch"])  # the public face
