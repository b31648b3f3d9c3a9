"""Readers of a run directory for the tests: its ranks' reports, checkpoints, parameters, sample records and
start point, and the bound within which two XLA programs' parameters agree."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

from conftest import wait_for

from dali_launch.trainer.resilience import saved
from dali_launch.trainer.run_dir import RunPaths


def rank_pid(run_root: Path, rank: int) -> int:
    """The pid of a rank of the (only) run under `run_root`, once it reported (at most 120 s)."""
    return wait_for(lambda: (rank_report(run_root, rank) or {}).get("pid"), timeout_s=120)


def has_checkpoint(run_root: Path) -> bool:
    """A step checkpoint exists in the run under `run_root` (a signal after it lands mid-run)."""
    return any(p.name.isdigit() for p in run_root.glob("*/checkpoints/*"))


def whole_checkpoints(run_root: Path) -> int:
    """How many whole checkpoints the runs of `run_root` hold, by the trainer's rule (saved.complete_steps:
    renamed from the tmp folder Orbax writes commit_success.txt into first); 0 before any run exists."""
    runs = [p for p in run_root.iterdir() if _a_run(p)] if run_root.is_dir() else []
    return sum(len(saved.complete_steps(RunPaths(run))) for run in runs)


def rank_report(run_root: Path, rank: int) -> dict | None:
    """What a rank of the (only) run under `run_root` reported of itself, once it has."""
    runs = [p for p in run_root.iterdir() if _a_run(p)] if run_root.exists() else []
    report = RunPaths(runs[0]).rank_report(rank) if runs else None
    return json.loads(report.read_text()) if report and report.exists() else None


def only_run(run_root: Path) -> RunPaths:
    runs = sorted(p for p in run_root.iterdir() if _a_run(p))
    assert len(runs) == 1, runs
    return RunPaths(runs[0])


def _a_run(path: Path) -> bool:
    """A run directory of a run root; not the run root's own .compile-cache (trainer/compile_cache.py)."""
    return path.is_dir() and not path.name.startswith(".")


def seen_prints(paths: RunPaths, epoch: int) -> collections.Counter:
    """--record-samples: how often each sample's fingerprint was trained on in `epoch`, over every rank
    and every segment of a resumed run."""
    import numpy as np

    return collections.Counter(np.concatenate([np.load(p) for p in paths.sample_records(epoch)]).tolist())


def final_params(paths: RunPaths, step: int | None = None) -> dict:
    """The parameters of a run's newest checkpoint (or of checkpoint `step`; one replica), as numpy arrays by path."""
    import orbax.checkpoint as ocp
    from flax.traverse_util import flatten_dict

    manager = ocp.CheckpointManager(paths.checkpoints.absolute())
    step = manager.latest_step() if step is None else step
    return flatten_dict(checkpoint_state(paths, step)["params"], sep="/")


def checkpoint_state(paths: RunPaths, step: int) -> dict:
    """Checkpoint `step`'s train state as a state dict of numpy arrays, whatever mesh wrote it (a state sharded
    over several processes restores only into arrays asked for: not into the saving job's devices, here)."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    tree = paths.checkpoints.absolute() / str(step) / "state"
    checkpointer = ocp.PyTreeCheckpointer()
    metadata = checkpointer.metadata(tree)
    structure = dict(getattr(metadata, "item_metadata", metadata))
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), structure)
    return checkpointer.restore(tree, args=ocp.args.PyTreeRestore(restore_args=as_numpy))


_START_POINT = """
import json, sys
from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.resilience import start_point
from dali_launch.trainer.run_dir import RunPaths
paths, processes, devices = RunPaths(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
spec = TaskSpec.load(paths.root)
start = start_point.read(paths, spec, 0, processes, devices)
plan = start_point.check_resume(paths, spec, [devices], [processes])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"jax", "jaxlib", "orbax", "flax"})
print(json.dumps({"step": start.step, "calls": start.calls_done, "offset": start.offset, "plan": plan, "heavy": heavy}))
"""


def start_point_without_jax(root: Path, processes: int, devices: int) -> dict:
    """Read in a fresh interpreter, as the launcher's --resume and a task read it: where process 0 of a job of
    `processes` processes and `devices` devices starts in the run at `root` (its checkpoint's step, the
    calls done, the offset), what check_resume says of it, and which of JAX, Orbax, Flax that imported."""
    args = [sys.executable, "-c", _START_POINT, str(root), str(processes), str(devices)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# Two different XLA programs (pmap and sharded, K steps per call or 1, one process or several) run
# the same SGD steps but may round their reductions differently on another CPU (XLA:CPU compiles for
# the host's instruction set), so they are compared within this bound, after few steps: rounding
# differences grow with every step of SGD with momentum. The same program stays bit-identical.
PARAMS_RTOL, PARAMS_ATOL = 1e-4, 1e-5


def assert_same_params(
    a: RunPaths, b: RunPaths, steps: tuple[int, int] | None = None, atol: float = PARAMS_ATOL
) -> None:
    """Their newest checkpoints' parameters (or those of checkpoints `steps`, a's and b's), within the bound
    (a wider `atol` where the two sum each step's rows in other groups: say why where it is given)."""
    import numpy as np

    pa, pb = (
        (final_params(a), final_params(b)) if steps is None else (final_params(a, steps[0]), final_params(b, steps[1]))
    )
    assert pa.keys() == pb.keys()
    for name in pa:
        np.testing.assert_allclose(pa[name], pb[name], rtol=PARAMS_RTOL, atol=atol, err_msg=name)
