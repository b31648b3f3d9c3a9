#!/usr/bin/env python3
"""On one GPU: the fsdp layout's cost on ViT-B/16, and the largest ViT that trains at batch 256.

Step only, as benchmarks/step_levers.py: random float16 images already on the device (what the DALI
pipeline gives under --precision bf16), the trainer's own train state (step/initial_state.state_maker,
which is free of DALI) and its device call (trainer/step/parallel.py's
Sharded runner), bf16 compute on float32 parameters, AdamW, 1000 classes, 224×224 images, batch 256,
the steps per call and XLA options the trainer gives that batch on a GPU (5; command buffers off, as
--cuda-graphs auto with nvJPEG). No DALI is imported.

1. fsdp-cost: ViT-B/16 through `Sharded` replicated (--mesh data:1, what auto gives one GPU) against
   the same runner with the fsdp layout path on (Sharded given a mesh with an fsdp axis of 1 device:
   state_shardings's shardings and keeping's constraints in the program, which --mesh fsdp:1 alone would
   not switch on: Mesh.shards_state is fsdp > 1). Each is compiled once, then timed in the order A B B A
   in one process; the ratio is B's mean over A's. The issue's target: the layout costs <= 3 %.
2. largest: a ladder of big_vision's ViT sizes (L/16, L/14, H/16, H/14, g/14, G/14, ViT-e/14), each rung in a
   fresh child process (an out-of-memory ends only that rung), smallest first, stopping at the first that
   does not train (--keep-going tries the rest). Per rung: the parameters, the state and gradients as
   plan/fit.py counts them, XLA's compiled buffers, the device's peak_bytes_in_use, images/s or
   the error. The rungs are vit.py's ViT class at sizes of big_vision's (not in the model zoo); a /14
   rung sets vit.PATCH to 14 in its own process. With --offload, the ladder keeps AdamW's moments in host
   memory (the trainer's --offload optimizer), its rows under "largest_offload"; with --remat, each block
   recomputes its activations in the backward pass (the trainer's --remat blocks), under "largest_remat"
   (both: "largest_offload_remat"). Without --remat, XLA:GPU's own rematerialisation pass is on, as in the
   trainer, and appears to fit the larger rungs to the pool (their buffers land at 99.5-101.3 GiB of 104.9).
   A rung whose compiled buffers exceed the pool is recorded out of memory without running it (--run-anyway
   runs it).
   Each part runs in a child process: the parent never starts JAX (a process holding the GPU, where XLA
   preallocates 75 %, left a first version's vit-l16 child an allocation failure it would not have had).

On one H200 (about 9 minutes in all, most of it compiling; --out is updated after each part and rung, and
parts or rungs not run keep what an earlier run wrote there, so the ladder can be split over commands as
benchmarks/gpu.sh's remat and offload questions do):

    python benchmarks/mesh_step.py --keep-going --out benchmarks/results/mesh_step/h200.json

`--smoke-cpu` runs both parts on CPU with a ViT-Ti-like tiny ViT (width 32, one block; a ladder of that one
rung) on 32×32 images in fp32, batch 4, its children sharing a temporary compilation cache: it checks the
script in about 10 s, its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mesh_calls import LaidOut, Setup, compiled, fresh_state, memory, replace_model, runner, timed, warm
from report import environment, listed

OFFLOADS = {  # where a ladder's optimizer state lives (--offload)
    False: "on the devices: every rung without optimizer-state offload",
    True: "in host memory: every rung with the optimizer's state offloaded (--offload optimizer)",
}
REMATS = {  # what a ladder's step keeps of the activations (--remat)
    False: "kept: no --remat (XLA's own rematerialisation pass only)",
    True: "each block's recomputed in the backward pass (--remat blocks)",
}
TARGET_PCT = 3.0  # the fsdp layout over one device costs at most this against the replicated step
TAG = "MESH_STEP_JSON "  # a child's result line on stdout


@dataclass(frozen=True)
class Rung:
    """A ViT of big_vision's sizes: vit.py's ViT class, its patch set in the rung's own process."""

    width: int
    depth: int
    mlp: int
    heads: int
    patch: int = 16


RUNGS = {  # big_vision's L/H/g/G at their patches, between them L/14 and H/16, then ViT-e (PaLI)
    "vit-l16": Rung(1024, 24, 4096, 16),
    "vit-l14": Rung(1024, 24, 4096, 16, 14),  # CLIP's: ViT-L at 256 tokens
    "vit-h16": Rung(1280, 32, 5120, 16),  # ViT-H at 196 tokens
    "vit-h14": Rung(1280, 32, 5120, 16, 14),
    "vit-g14": Rung(1408, 40, 6144, 16, 14),
    "vit-G14": Rung(1664, 48, 8192, 16, 14),
    "vit-e14": Rung(1792, 56, 15360, 16, 14),
}
SMOKE_RUNGS = {"tiny": Rung(32, 1, 64, 2)}  # one rung: each is a process of its own (seconds of start-up)
SMOKE_MODEL = "tiny"  # the fsdp-cost part's model under --smoke-cpu


def factory(name: str):
    """A --model factory (model/registry.py's contract) for rung `name`: vit.py's ViT at that rung's sizes."""
    rung = {**RUNGS, **SMOKE_RUNGS}[name]

    def make(num_classes: int, drop_path: float = 0.0, vit_pool: str = "gap", attention: str = "xla", remat="none"):
        from dali_launch.trainer.model import vit

        implementation = "xla" if attention == "auto" else attention  # as vit._factory
        sizes = rung.width, rung.depth, rung.mlp, rung.heads
        return vit.ViT(num_classes, *sizes, vit_pool, drop_path, implementation, remat == "blocks")

    return make


def __getattr__(name: str):  # `mesh_step:vit-l16` etc. for the models' loader (module-level getattr)
    if name in RUNGS or name in SMOKE_RUNGS:
        return factory(name)
    raise AttributeError(name)


def fsdp_cost(setup: Setup, seconds: float) -> dict:
    """ViT-B/16 replicated (A) against the fsdp layout path (B), each compiled once, timed A B B A."""
    import jax

    from dali_launch.trainer.plan.fit import StateSize
    from dali_launch.trainer.plan.mesh import Mesh

    device = jax.local_devices()[0]
    fresh, example = fresh_state(setup)
    shapes = jax.eval_shape(fresh, example)[1]
    host = jax.jit(fresh)(jax.device_put(example, jax.local_devices(backend="cpu")[0]))[1]
    contenders = {"replicated": False, "fsdp-layout": True}
    runs, texts = {}, {}
    for name, layout in contenders.items():
        mode, tally, batch = runner(setup, device, shapes, layout)
        call, compile_s = compiled(mode, shapes, tally, batch)
        state, tally = warm(call, mode.place(host), tally, batch)
        runs[name] = {"call": call, "state": state, "tally": tally, "batch": batch}
        texts[name] = call.as_text()
        kind = "Sharded, mesh None" if not layout else f"Sharded, mesh {LaidOut()}: {len(mode.shardings)} shardings"
        runs[name]["info"] = {
            "runner": kind,
            "compile_s": compile_s,
            "state_bytes_per_device": StateSize.of(shapes).on_device(LaidOut() if layout else Mesh()),
        }
        print(f"{name}: compiled in {compile_s:.1f} s", flush=True)
    order = ["replicated", "fsdp-layout", "fsdp-layout", "replicated"]
    segments = []
    for name in order:
        r = runs[name]
        rows = setup.batch * setup.steps
        r["state"], r["tally"], rate, calls, elapsed = timed(
            r["call"], r["state"], r["tally"], r["batch"], rows, seconds
        )
        segments.append({"contender": name, "images_per_s": rate, "calls": calls, "seconds": elapsed})
        print(f"  {name:<12}{rate:>10,.1f} images/s ({calls} calls, {elapsed:.1f} s)", flush=True)
    means = {n: sum(s["images_per_s"] for s in segments if s["contender"] == n) / 2 for n in contenders}
    ratio = means["fsdp-layout"] / means["replicated"]
    return {
        **asdict(setup),
        "optimizer": "adamw",
        "order": order,
        "segments": segments,
        "contenders": {n: {**runs[n]["info"], "images_per_s": means[n]} for n in contenders},
        "ratio": ratio,
        "cost_pct": 100 * (1 - ratio),
        "target_pct": TARGET_PCT,
        "meets_target": 100 * (1 - ratio) <= TARGET_PCT,
        "same_program": strip(texts["replicated"]) == strip(texts["fsdp-layout"]),
        "program_lines_differing": len(
            set(strip(texts["replicated"]).splitlines()) ^ set(strip(texts["fsdp-layout"]).splitlines())
        ),
        "program_lines": len(strip(texts["replicated"]).splitlines()),
        "memory": memory(runs["replicated"]["call"], device),
    }


def strip(hlo: str) -> str:
    """The compiled program less its module's name line (the two contenders' functions differ in name only)."""
    return "\n".join(line for line in hlo.splitlines() if not line.startswith("HloModule"))


def rung(name: str, setup: Setup, seconds: float, run_anyway: bool = False, offload: bool = False) -> dict:
    """One ladder rung, in this (child) process: estimate, compile, init, place, run; the error if any. A
    program whose buffers (XLA's arguments and temporaries) exceed the device's pool is not run (its first
    call could not allocate them) unless `run_anyway`."""
    import jax

    from dali_launch.trainer.errors import UsageError
    from dali_launch.trainer.model import vit
    from dali_launch.trainer.plan import fit
    from dali_launch.trainer.plan.mesh import Mesh

    spec = {**RUNGS, **SMOKE_RUNGS}[name]
    vit.PATCH = spec.patch  # this process only: vit.py reads it when the model is traced
    out = {"name": name, **asdict(spec), "tokens": vit.tokens(setup.image_size, "gap"), "status": "started"}
    device = jax.local_devices()[0]
    try:
        fresh, example = fresh_state(setup)
        shapes = jax.eval_shape(fresh, example)[1]
        mode, tally, batch = runner(setup, device, shapes, layout=False, offload=offload)
        size = fit.StateSize.of(shapes)
        state_bytes, host_bytes = size.on_device(Mesh(), offload), size.on_host(Mesh(), offload)
        param_bytes, pool, need = size.params, fit.pool_bytes(device), size.need(Mesh(), offload)
        out |= {"params": sum(x.size for x in jax.tree.leaves(shapes.params)), "state_bytes": state_bytes}
        out |= {"host_state_bytes": host_bytes, "gradient_bytes": param_bytes, "memory_fit_need_bytes": need}
        out["pool_bytes"] = pool
        try:
            fit.check(Mesh(), 1, size, offload, pool)
            out["memory_fit"] = "passes (activations not counted)"
        except UsageError as e:
            out["memory_fit"] = f"refused: {e}"
        call, out["compile_s"] = compiled(mode, shapes, tally, batch)
        out |= memory(call, device)
        buffers = out.get("xla_argument_bytes", 0) + out.get("xla_temp_bytes", 0)
        if pool and buffers > pool and not run_anyway:
            short = f"XLA's buffers for the step, {fit.size_words(buffers)}, exceed the pool, {fit.size_words(pool)}"
            out |= {"status": "out of memory", "error": f"{short}: not run (--run-anyway runs it)"}
            return out
        began = time.perf_counter()
        host = jax.jit(fresh)(jax.device_put(example, jax.local_devices(backend="cpu")[0]))[1]
        state = mode.place(host)
        del host
        out["init_and_place_s"] = time.perf_counter() - began
        state, tally = warm(call, state, tally, batch, calls=1)
        rows = setup.batch * setup.steps
        state, tally, rate, calls, elapsed = timed(call, state, tally, batch, rows, seconds, at_least=2)
        out |= {"status": "trains", "images_per_s": rate, "ms_per_step": 1000 * elapsed / (calls * setup.steps)}
        out |= {"calls": calls, "peak_bytes_in_use": (device.memory_stats() or {}).get("peak_bytes_in_use")}
    except Exception as e:  # the rung's own outcome: out of memory (XLA's RESOURCE_EXHAUSTED) or another failure
        text = f"{type(e).__name__}: {e}"
        oom = "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
        out |= {"status": "out of memory" if oom else "failed", "error": text.strip().splitlines()[0][:400]}
        out["peak_bytes_in_use"] = (device.memory_stats() or {}).get("peak_bytes_in_use")
    return out


def child(args, what: str, timeout: float) -> dict:
    """`what` (fsdp-cost, or a rung's name) run in a fresh process of this script, its result line read back.
    The parent never starts JAX: a process holding the GPU (XLA preallocates 75 % of it) would leave a
    rung's child a pool it cannot have."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", what, "--seconds", str(args.seconds)]
    command += ["--model", args.model, "--batch-size", str(args.batch_size), "--image-size", str(args.image_size)]
    command += ["--steps-per-call", str(args.steps_per_call)] + (["--smoke-cpu"] if args.smoke_cpu else [])
    command += (["--offload"] if args.offload else []) + (["--remat"] if args.remat else [])
    began = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        sys.stdout.write("".join(f"    {line}\n" for line in proc.stdout.splitlines() if not line.startswith(TAG)))
        found = [line[len(TAG) :] for line in proc.stdout.splitlines() if line.startswith(TAG)]
        row = json.loads(found[-1]) if found else {"name": what, "status": "failed"}
        if not found:  # the process died (the host's memory, a signal): its exit status and last words
            row["error"] = f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
    except subprocess.TimeoutExpired:
        row = {"name": what, "status": "failed", "error": f"over its {timeout:.0f} s (--part-timeout)"}
    row["process_s"] = time.perf_counter() - began
    return row


def ladder(args, write) -> list[dict]:
    """Each rung in a fresh child process, smallest first; after one that does not train, the rest are
    marked not tried (each is larger) unless --keep-going."""
    rows = []
    for name in args.rungs:
        if rows and rows[-1]["status"] != "trains" and not args.keep_going:
            rows.append({"name": name, **asdict({**RUNGS, **SMOKE_RUNGS}[name]), "status": "not tried"})
            continue
        row = child(args, name, args.part_timeout)
        write.environment(row.pop("environment", None))
        rows.append(row)
        rate = f"{row['images_per_s']:,.1f} images/s" if "images_per_s" in row else row.get("error", "")[:160]
        print(f"  {name:<9}{row.get('params', 0) / 1e6:>8.0f} M params  {row['status']:<14}{rate}", flush=True)
        write(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", type=listed(choices=("fsdp-cost", "largest")), default=["fsdp-cost", "largest"])
    parser.add_argument("--model", default="vit-b16", help="fsdp-cost's model.")
    parser.add_argument("--rungs", type=listed(choices=(*RUNGS, *SMOKE_RUNGS)), help="The ladder (default: all).")
    parser.add_argument("--keep-going", action="store_true", help="Try the rungs above one that did not train.")
    parser.add_argument("--run-anyway", action="store_true", help="Run a rung whose compiled buffers exceed the pool.")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--steps-per-call", type=int, default=5, help="The trainer's auto for 256 on a GPU.")
    parser.add_argument("--seconds", type=float, default=6.0, help="Timed seconds per segment or rung.")
    parser.add_argument(
        "--part-timeout", type=float, default=400.0, help="Seconds fsdp-cost's or a rung's process may take."
    )
    parser.add_argument("--offload", action="store_true", help="The ladder with the optimizer's state in host memory.")
    parser.add_argument("--remat", action="store_true", help="The ladder with each block's activations recomputed.")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU, tiny ViTs at 32x32: checks the script only.")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the child process of fsdp-cost or of one rung
    args = parser.parse_args(argv)
    precision = "bf16"
    if args.smoke_cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
        if not args.child and "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # the rung's child finds its programs
            os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="mesh-step-smoke-")
            os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
            atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
        args.model, args.batch_size, args.image_size, args.steps_per_call = SMOKE_MODEL, 4, 32, 2
        args.rungs, precision = args.rungs or list(SMOKE_RUNGS), "fp32"  # XLA:CPU's bf16 dots compile slowly
    args.rungs = args.rungs or list(RUNGS)
    remat = "blocks" if args.remat else "none"
    setup = Setup(args.model, args.batch_size, args.image_size, precision, args.steps_per_call, remat=remat)
    if args.child:
        if args.child == "fsdp-cost":
            row = fsdp_cost(setup, args.seconds)
        else:
            row = rung(args.child, replace_model(setup, args.child), args.seconds, args.run_anyway, args.offload)
        print(TAG + json.dumps({**row, "environment": environment()}), flush=True)
        return 0
    doc = json.loads(args.out.read_text()) if args.out and args.out.exists() else {}
    doc |= {"argv": sys.argv}
    offload, kept = OFFLOADS[args.offload], REMATS[args.remat]
    key = "largest" + "_offload" * args.offload + "_remat" * args.remat

    def write() -> None:
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(doc, indent=2) + "\n")

    def environment_of(found: dict | None) -> None:
        if found:
            doc["environment"] = found

    failed = False
    if "fsdp-cost" in args.parts:
        print(f"fsdp-cost: {args.model}, batch {args.batch_size}, {args.image_size}x{args.image_size}", flush=True)
        cost = child(args, "fsdp-cost", args.part_timeout)
        environment_of(cost.pop("environment", None))
        doc["fsdp_cost"] = cost
        if "ratio" in cost:
            print(
                f"  fsdp layout / replicated: {cost['ratio']:.4f} (cost {cost['cost_pct']:.2f} %, target <= {TARGET_PCT} %)"
            )
        else:
            failed = True
            print(f"  failed: {cost.get('error')}")
        write()
    if "largest" in args.parts:
        sizes = f"batch {args.batch_size}, {args.image_size}x{args.image_size}"
        print(f"largest: {sizes}, state {offload}; activations {kept}", flush=True)
        earlier = {r["name"]: r for r in doc.get(key, {}).get("rungs", [])}

        def keep(rows: list[dict]) -> None:
            merged = {
                **earlier,
                **{r["name"]: r for r in rows if r["status"] != "not tried" or r["name"] not in earlier},
            }
            known = list({**RUNGS, **SMOKE_RUNGS})  # the ladder's order; rows of names since removed go last
            ranked = sorted(merged.values(), key=lambda r: known.index(r["name"]) if r["name"] in known else len(known))
            trains = [r["name"] for r in ranked if r["status"] == "trains"]
            doc[key] = {
                "batch": args.batch_size,
                "image_size": args.image_size,
                "precision": precision + " compute, float32 parameters and AdamW moments",
                "steps_per_call": args.steps_per_call,
                "offload": offload,
                "activations": kept,
                "largest_that_trains": trains[-1] if trains else None,
                "rungs": ranked,
            }
            write()

        keep.environment = environment_of
        rows = ladder(args, keep)
        failed |= any(r["status"] == "failed" for r in rows)
        print(f"  largest that trains: {doc[key]['largest_that_trains']}")
    if args.out:
        print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
