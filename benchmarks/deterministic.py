#!/usr/bin/env python3
"""`--deterministic` on the GPU. ResNet-50 bf16 run twice gives the same checksums, and killed
(kill -9) mid-epoch then `--resume`d gives them again; what that costs against the defaults.

    baseline   `dali-launch train --pipeline folders --model resnet50 --precision bf16 --batch-size 256`,
               every other flag at its default: images/s of the epochs after the first (which compiles)
    det-1      the same with --deterministic, compiling into a fresh XLA cache of its own
    det-2      the same again, from det-1's compile cache: the same program run twice
    det-cut    the same with --checkpoint-every-steps, compiling into a fresh cache of its own (so det-1 and
               det-cut are two compiles), SIGKILLed (its process group) once a checkpoint part way through
               epoch 1 is complete, then `dali-launch --resume RUN`: the resumed run
    excl-1/2   (--variants ...,exclude) no --deterministic, XLA_FLAGS=--xla_gpu_exclude_nondeterministic_ops=true
               instead: the kernels --deterministic asks for, twice, each compiling and autotuning afresh
               (excl-2 with --compile-cache off: no autotuning picks kept), to see whether two autotunings agree
    cut-root   (--variants ...,root) det-cut again, from det-1's compile cache and autotuning picks: a run of
               the same run root killed and resumed, as a user's is
    ops        (--variants ...,ops) no --deterministic, XLA_FLAGS=--xla_gpu_deterministic_ops=true: what
               --deterministic sets, alone (against the trial set of exclude, which keeps autotuning)
    base-2     (--variants ...,baseline2) the baseline again: what the defaults give twice
    data       the trainer's training pipelines built twice in one process, the first calls' pixels
               summed on the device: DALI alone, the hardware decoder's share included
    before     (--variants ...,before --before DIR) the default order against older code
               (DIR holds its launcher/ and trainer/): `before` is the baseline's run on DIR's code (from
               the baseline's compile cache); with --mnist LMDB_DIR also the MNIST MLP with every default,
               --mlp-epochs, on DIR's code and on this one, alternately, --mlp-runs each. PASS when this
               code's images/s are at least 98 % of DIR's for both (within 2 %)
Every run's checksums are result.json's (a SHA-256 of each replica's parameters, statistics and EMA).
PASS when det-1, det-2 and the resumed det-cut agree. Each run is a fresh process; none shares a cache.

On the GPU machine (`dali-launch data synth` writes the data once if --data is empty; 25,600 images are
20 calls of 5 x 256 an epoch; PRE: older code, `git archive COMMIT launcher trainer`):

    python benchmarks/deterministic.py --data /tmp/synth-det --classes 100 --variants det,before \
        --before PRE --mnist /tmp/fmnist --out benchmarks/results/deterministic/h200.json    # ~5 min with the synth
    python benchmarks/deterministic.py --data /tmp/synth-det --classes 100 --variants det,exclude,data \
        --out benchmarks/results/deterministic/h200.json                                      # ~5 min

`--smoke-cpu` runs it on CPU devices with tiny images and a small CNN: it checks the script (and that a
kill -9 and resume give the same bits on the CPU), its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from imagenet import synth  # the same data set, written once
from report import code_env, environment, listed

CLI = [sys.executable, "-m", "dali_launch.launcher.cli"]
TIMEOUT_S = 900
WORKLOAD = {"model": "resnet50", "precision": "bf16", "batch_size": 256, "image_size": 224}
SMOKE = {"model": "cnn", "precision": "fp32", "batch_size": 8, "image_size": 32, "learning_rate": 0.01}  # 0.1 diverges
EXCLUDE = "--xla_gpu_exclude_nondeterministic_ops=true"
OPS = "--xla_gpu_deterministic_ops=true"


def with_xla_flag(flag: str) -> dict:
    return {"XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()}


def train_flags(args, workload: dict) -> list[str]:
    flags = ["--pipeline", "folders", "--data-dir", str(args.data), "--num-classes", str(args.classes)]
    flags += ["--epochs", str(args.epochs), "--platform", "cpu" if args.smoke_cpu else "gpu"]
    for key, value in workload.items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags


def launch(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    """The CLI in its own session (its process group is its pid: a kill -9 reaches all of it)."""
    return subprocess.Popen(
        [*CLI, *argv],
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def read_run(run_root: Path, row: dict, out: str = "", err: str = "") -> dict:
    """The run's figures from its files: images/s after the first epoch, data wait, checksums."""
    runs = sorted(p for p in run_root.iterdir() if p.is_dir()) if run_root.exists() else []
    if not runs or not (runs[0] / "result.json").exists():
        return {**row, "error": (err or out).strip().splitlines()[-8:]}
    epochs = [json.loads(line) for line in (runs[0] / "metrics.jsonl").read_text().splitlines()]
    steady = [e for e in epochs if not e.get("resumed_at_call")][1:] or epochs
    resolved = json.loads((runs[0] / "rank_map.json").read_text())[0]["resolved"]
    return {
        **row,
        "run_dir": str(runs[0]),
        "images_per_s": sum(e["images_per_s"] for e in steady) / len(steady),
        "data_wait_fraction": sum(e["data_wait_fraction"] for e in steady) / len(steady),
        "xla_flags": resolved.get("xla_flags"),
        "checksums": json.loads((runs[0] / "result.json").read_text())["checksums"],
        "epochs": epochs,
    }


def run(args, name: str, extra: list[str], root: Path, env: dict | None = None, flags: list | None = None) -> dict:
    """One `dali-launch train` to its end (`flags`: the workload's, else the benchmark's), with a fresh XLA
    cache of its own unless `extra` names one."""
    cache = [] if "--compile-cache" in extra else ["--compile-cache", str(root / f"xla-{name}")]
    flags = flags or train_flags(args, args.workload)
    argv = ["train", *flags, *extra, *cache, "--run-root", str(root / name)]
    start = time.perf_counter()
    proc = launch(argv, env)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    row = {"name": name, "argv": argv, "env": env or {}, "wall_s": time.perf_counter() - start}
    return read_run(root / name, row, out, err)


def before_runs(args, root: Path) -> dict:
    """The default order on this code against `--before`'s: the benchmark's workload once (the baseline is
    this code's run; from its compile cache), and the MNIST MLP with every default, alternately."""
    old = code_env(args.before, root / "code-before")
    rows = {"before": run(args, "before", ["--compile-cache", str(root / "xla-baseline")], root, old)}
    if args.mnist:
        platform = "cpu" if args.smoke_cpu else "gpu"
        flags = ["--data-dir", str(args.mnist.absolute()), "--epochs", str(args.mlp_epochs), "--platform", platform]
        for i in range(1, args.mlp_runs + 1):
            for name, env in (("mlp-before", old), ("mlp", None)):
                cache = ["--compile-cache", str(root / f"xla-{name}")]
                rows[f"{name}-{i}"] = run(args, f"{name}-{i}", cache, root, env, flags)
    return rows


def mid_epoch_checkpoint(run_root: Path, epoch: int) -> dict | None:
    """A complete checkpoint part way through `epoch` (Orbax's committed step, read as saved.py reads it)."""
    for meta in sorted(run_root.glob("*/checkpoints/*/meta/metadata")):
        # whole once renamed: Orbax writes commit_success.txt into STEP.orbax-checkpoint-tmp-* first
        step = meta.parent.parent
        if step.name.isdigit() and (step / "commit_success.txt").exists():
            record = json.loads(meta.read_text())
            if record["epoch"] == epoch and record["calls_done"] > 0:
                return record
    return None


def cut_and_resume(args, name: str, extra: list[str], root: Path, cache: str = "") -> dict:
    """The run SIGKILLed once a checkpoint mid-way through its last epoch exists, then resumed to its end;
    compiled into a cache of its own unless `cache` names one."""
    every = ["--checkpoint-every-steps", str(args.checkpoint_every_steps)]
    argv = [
        "train",
        *train_flags(args, args.workload),
        *extra,
        *every,
        "--compile-cache",
        cache or str(root / f"xla-{name}"),
    ]
    argv += ["--run-root", str(root / name)]
    start, epoch = time.perf_counter(), args.epochs - 1
    proc = launch(argv)
    killed = None
    while proc.poll() is None and time.perf_counter() - start < TIMEOUT_S:
        killed = mid_epoch_checkpoint(root / name, epoch)
        if killed:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    row = {
        "name": name,
        "argv": argv,
        "env": {},
        "killed_at": killed and {k: killed[k] for k in ("epoch", "calls_done")},
    }
    if not killed:
        return {**row, "error": [f"no checkpoint part way through epoch {epoch} before the run ended"]}
    run_dir = next(p for p in (root / name).iterdir() if p.is_dir())
    resumed = launch(["--resume", str(run_dir)])
    out, err = resumed.communicate(timeout=TIMEOUT_S)
    said = [line for line in out.splitlines() if "resumed from checkpoint" in line]
    row = {**row, "resumed": said[0] if said else None, "wall_s": time.perf_counter() - start}
    return read_run(root / name, row, out, err)


def data_part(args) -> dict:
    """In this (child) process: the trainer's training pipelines built twice, their first calls' pixels and
    labels summed on the device each time (a position-weighted sum of the raw bits: any change shows)."""
    import jax
    import jax.numpy as jnp
    from imagenet import task_spec

    from dali_launch.trainer.data import dali, shards
    from dali_launch.trainer.data.batches import Readers
    from dali_launch.trainer.plan import alone, plan

    spec = task_spec(args.data, args.workload, args.classes, 1, "cpu" if args.smoke_cpu else "gpu")
    devices = jax.local_devices()[:1]
    decided = plan(alone(spec, devices))
    step = decided.step
    sharding = shards.Sharding(0, 1, 1, decided.data.readers_per_device)

    def weighted(x):
        bits = jax.lax.bitcast_convert_type(x, jnp.uint16 if x.dtype.itemsize == 2 else jnp.uint32)
        flat = bits.reshape(-1).astype(jnp.uint32)
        return int(jnp.sum(flat * (jnp.arange(flat.size, dtype=jnp.uint32) | 1)))

    sums = []
    for _ in range(2):
        start = dali.Start("shards", spec.step.seed, 1, step.batch_per_device_step, step.steps_per_call)
        path, config = f"{args.data}/training", decided.data
        data = dali.build(
            dali.Split(path, True, step.call_batch), Readers(devices, devices, sharding), config, start=start
        )
        sums.append([[weighted(b["images"]), weighted(b["labels"])] for b in (data.next() for _ in range(args.calls))])
        del data
    return {"name": "data", "sums": sums, "same": sums[0] == sums[1], "decoder": decided.data.decoder}


def child_data(args) -> dict:
    argv = [sys.executable, __file__, "--part", "data", "--data", str(args.data), "--classes", str(args.classes)]
    argv += ["--calls", str(args.calls)] + (["--smoke-cpu"] if args.smoke_cpu else [])
    env = {**os.environ, **({"JAX_PLATFORMS": "cpu"} if args.smoke_cpu else {})}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, env=env)
    if proc.returncode:
        return {"name": "data", "error": proc.stderr.strip().splitlines()[-5:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def verdict(rows: dict) -> dict:
    """PASS/FAIL of --deterministic, its cost, and what the other variants showed."""
    sums = lambda name: rows.get(name, {}).get("checksums")
    det = [sums("det-1"), sums("det-2"), sums("det-cut")]
    mid = (rows.get("det-cut", {}).get("killed_at") or {}).get("calls_done", 0) > 0
    rate = lambda name: rows.get(name, {}).get("images_per_s")
    cost = lambda name: 1 - rate(name) / rate("baseline") if rate(name) and rate("baseline") else None
    out = {
        "deterministic": "PASS" if all(det) and det[0] == det[1] == det[2] and mid else "FAIL",
        "cost": cost("det-1"),
    }
    if "excl-1" in rows:
        out |= {
            "exclude_same_twice": bool(sums("excl-1")) and sums("excl-1") == sums("excl-2"),
            "exclude_cost": cost("excl-1"),
        }
    if "cut-root" in rows:
        out["cut_root_same"] = bool(sums("cut-root")) and sums("cut-root") == sums("det-1")
    if "ops" in rows:
        out |= {"ops_same": bool(sums("ops")) and sums("ops") == sums("det-1"), "ops_cost": cost("ops")}
    if "base-2" in rows:
        out["baseline_same_twice"] = bool(sums("baseline")) and sums("baseline") == sums("base-2")
    if "data" in rows:
        out["data_same_twice"] = rows["data"].get("same")
    if "before" in rows:
        out |= default_order(rows)
    return out


def default_order(rows: dict) -> dict:
    """This code's default order against --before's: images/s ratios (means over the runs), PASS at >= 0.98."""

    def mean(names: list[str]) -> float | None:
        rates = [rows[n].get("images_per_s") for n in names]
        return sum(rates) / len(rates) if rates and all(rates) else None

    def ratio(new: list[str], old: list[str]) -> float | None:
        a, b = mean(new), mean(old)
        return a / b if a and b else None

    out = {"default_vs_before": ratio(["baseline"], ["before"])}
    old = [n for n in rows if n.startswith("mlp-before-")]
    if old:
        out["mlp_vs_before"] = ratio([n for n in rows if n.startswith("mlp-") and n not in old], old)
    ok = all(v is not None and v >= 0.98 for v in out.values())
    return {**out, "default_order": "PASS" if ok else "FAIL"}


def _what(r: dict) -> str:
    """A run's flags beside the recipe's, as the table shows them."""
    argv = r.get("argv", [])
    what = ["--deterministic"] if "--deterministic" in argv else []
    cache = Path(argv[argv.index("--compile-cache") + 1]).name if "--compile-cache" in argv else ""
    what += [f"{cache[4:]}'s compile cache"] if cache and cache != f"xla-{r['name']}" else []
    what += [f"XLA_FLAGS={r['env']['XLA_FLAGS']}"] if r.get("env", {}).get("XLA_FLAGS") else []
    what += ["the code of --before"] if r.get("env", {}).get("PYTHONPATH") else []
    what += ["MNIST MLP"] if r["name"].startswith("mlp") else []
    return ", ".join(what) or "defaults"


def table(rows: dict, result: dict | None = None) -> str:
    fig = lambda v, f: "-" if v is None else format(v, f)
    lines = [f"{'run':<10}{'images/s':>10}{'data wait':>11}  {'checksum (replica 0)':<22}what", "-" * 96]
    for name, r in rows.items():
        if name == "data":
            continue
        what = _what(r)
        what += (
            f"; killed at epoch {r['killed_at']['epoch']} call {r['killed_at']['calls_done']}"
            if r.get("killed_at")
            else ""
        )
        lines.append(
            f"{name:<10}{fig(r.get('images_per_s'), ',.0f'):>10}{fig(r.get('data_wait_fraction'), '.1%'):>11}  "
            f"{(r.get('checksums') or ['-'])[0][:20]:<22}{what}" + (f"  ERROR {r['error']}" if "error" in r else "")
        )
    if result is None:  # a run in progress
        return "\n".join(lines)
    ends = ", ".join(
        f"{n} {(rows.get(n, {}).get('checksums') or ['-'])[0][:12]}" for n in ("det-1", "det-2", "det-cut")
    )
    lines.append(
        f"--deterministic: {result['deterministic']} (PASS: these agree and det-cut was cut mid-epoch: {ends})"
    )
    lines.append(f"its cost: {fig(result['cost'], '.1%')} of the baseline's images/s")
    keys = ("exclude_same_twice", "exclude_cost", "cut_root_same", "ops_same", "ops_cost")
    for key in (*keys, "baseline_same_twice", "data_same_twice"):
        if key in result:
            lines.append(f"{key}: {fig(result[key], '.1%') if key.endswith('cost') else result[key]}")
    if "default_order" in result:
        ratios = ", ".join(f"{k} {fig(result.get(k), '.3f')}" for k in ("default_vs_before", "mlp_vs_before"))
        lines.append(f"default order against --before: {result['default_order']} (PASS: >= 0.980; {ratios})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="JPEG class folders (training/, testing/).")
    parser.add_argument("--synth", type=int, default=25_600, help="Training images to synthesise if --data is empty.")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=2, help="Epochs of each run (the first compiles).")
    parser.add_argument(
        "--checkpoint-every-steps", type=int, default=25, help="det-cut's checkpoints (a kill follows one)."
    )
    parser.add_argument(
        "--variants",
        type=listed(choices=("det", "exclude", "root", "ops", "baseline2", "data", "before")),
        default="det,data",
    )
    parser.add_argument("--before", type=Path, help="Older code (its launcher/, trainer/): `before`.")
    parser.add_argument("--mnist", type=Path, help="MNIST-format LMDBs (training/, testing/): `before`'s MLP runs.")
    parser.add_argument("--mlp-epochs", type=int, default=10, help="Epochs of each MLP run (the first compiles).")
    parser.add_argument("--mlp-runs", type=int, default=2, help="MLP runs of each code, alternately.")
    parser.add_argument("--calls", type=int, default=3, help="Device calls the data part sums.")
    parser.add_argument("--part", choices=("data",), help=argparse.SUPPRESS)  # the child's part
    parser.add_argument("--out", type=Path)
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU devices, tiny images: checks the script only.")
    args = parser.parse_args(argv)
    args.data, args.workload = args.data.absolute(), SMOKE if args.smoke_cpu else WORKLOAD
    if "root" in args.variants and "det" not in args.variants:
        parser.error("--variants root resumes from det-1's compile cache: add det")
    if "before" in args.variants and not (args.before and (args.before / "trainer").is_dir()):
        parser.error("--variants before needs --before DIR, a tree with the older code's launcher/ and trainer/")
    if args.part:
        print(json.dumps(data_part(args)))
        return 0
    synth(args)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="deterministic-bench-") as tmp:
        root = Path(tmp)
        det = [
            ("det-1", ["--deterministic"]),
            ("det-2", ["--deterministic", "--compile-cache", str(root / "xla-det-1")]),
        ]
        plan = [("baseline", []), *(det if "det" in args.variants else [])]
        plan += [("base-2", [])] if "baseline2" in args.variants else []
        for name, extra in plan:
            rows[name] = run(args, name, extra, root)
            print(table(rows), flush=True)
        if "det" in args.variants:
            rows["det-cut"] = cut_and_resume(args, "det-cut", ["--deterministic"], root)
        if "root" in args.variants:
            rows["cut-root"] = cut_and_resume(args, "cut-root", ["--deterministic"], root, str(root / "xla-det-1"))
        if "exclude" in args.variants:
            rows["excl-1"] = run(args, "excl-1", [], root, with_xla_flag(EXCLUDE))
            rows["excl-2"] = run(args, "excl-2", ["--compile-cache", "off"], root, with_xla_flag(EXCLUDE))
        if "ops" in args.variants:
            rows["ops"] = run(args, "ops", [], root, with_xla_flag(OPS))
        print(table(rows), flush=True)
        if "before" in args.variants:
            rows |= before_runs(args, root)
            print(table(rows), flush=True)
        if "data" in args.variants:
            rows["data"] = child_data(args)
    result = verdict(rows)
    text = table(rows, result)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"argv": sys.argv, "environment": environment(), "workload": args.workload, "table": text}
        args.out.write_text(json.dumps({**doc, "result": result, "rows": rows}, indent=2) + "\n")
    timed = args.smoke_cpu or result.get("default_order", "PASS") == "PASS"  # CPU smoke figures mean nothing
    return 0 if result["deterministic"] == "PASS" and timed else 1


if __name__ == "__main__":
    sys.exit(main())
