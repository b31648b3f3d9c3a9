#!/usr/bin/env python3
"""The example's DALI + Flax loop against dali-launch's trainer, one process, one GPU, same data.

Both read the same Caffe2 LMDBs (Fashion-MNIST, from `dali-launch data prepare --from IDX_DIR --to DIR`):

  example   NVIDIA's "Training neural network with DALI and Flax" notebook (example.py), as
            written: one `mixed`-decoding pipeline (4 threads), DALI's JAX `DALIGenericIterator`,
            batch 50, a `@jax.jit` train step per batch, a jitted accuracy per test batch. Only
            timing is added: around the iterator's next() (its data wait) and one
            `jax.block_until_ready` after the very first step (its compile time).
  ours      `dali_launch.trainer.task.run_task(RUN_DIR)` on a TaskSpec for 1 GPU, once per
            combination of --parallel, --decoders, --steps-per-call, --readers and --decoded-caches,
            named like `ours-pmap-cpu-k24-r4` (r: DALI readers per device, as the trainer resolved it;
            `-cache-off` where --decoded-cache is not auto). Its
            numbers come from RUN_DIR/metrics.jsonl and RUN_DIR/rank_map.json.

The table gives per contender: train and eval seconds per epoch (means of epochs 1..N-1: epoch 0
compiles), their ratio to the example's, training images/s, the fraction of the training epoch spent
waiting for data, compile seconds (the first step, its batch in hand, until done), final test
accuracy and set-up seconds.

On the GPU machine (docs/performance.md's command; --plot needs matplotlib: `pip install 'dali-launch[bench]'`):

    python benchmarks/epoch_time.py --data /tmp/fmnist --epochs 5 --parallel pmap,sharded \
        --steps-per-call 24 --plot benchmarks/results/epoch_time/h200.png --out benchmarks/results/epoch_time/h200.json

`--out` keeps every number and the command line as JSON; `--plot FILE.png` charts epoch and eval
times. `--plot-from RESULTS.json --plot FILE.png` redraws the chart from an earlier --out file
without running anything (e.g. off the GPU machine).

`--smoke-cpu` runs the same code paths with CPU pipelines and CPU JAX (for checking the script
without a GPU; its numbers mean nothing). A contender that fails is recorded as failed; the others
are still timed, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from example import run_example  # the same folder: run as a script
from report import (
    PARALLEL,
    add_ratios,
    environment,
    listed,
    plot,
    read_epochs,
    summarize,
    table,
)

from dali_launch.trainer.data.codecs import CODECS_PATH
from dali_launch.trainer.topology import disable_cuda_graphs


@dataclass(frozen=True)
class Ours:
    """One configuration of our trainer to time."""

    parallel: str
    decoder: str
    steps_per_call: int
    readers: int  # readers_per_device; 0: the trainer picks
    decoded_cache: str = "auto"  # --decoded-cache

    def name(self, readers: int | str) -> str:
        cache = "" if self.decoded_cache == "auto" else f"-cache-{self.decoded_cache}"
        return f"ours-{self.parallel}-{self.decoder}-k{self.steps_per_call}-r{readers}{cache}"


def run_ours(
    data_dir: Path,
    epochs: int,
    ours: Ours,
    jax_platform: str,
    root: Path,
    reader_threads: int | None,
    cuda_graphs: str = "auto",
) -> dict:
    from dali_launch.trainer.config import (
        DataConfig,
        DistributedConfig,
        Layout,
        TaskSpec,
        replaced,
    )
    from dali_launch.trainer.run_dir import RunPaths
    from dali_launch.trainer.task import run_task

    name = ours.name(ours.readers or "auto")
    run_dir = root / name
    data = DataConfig(
        data_dir=str(data_dir),
        decoder=ours.decoder,
        readers_per_device=ours.readers,
        decoded_cache=ours.decoded_cache,
        **({"reader_threads": reader_threads} if reader_threads else {}),
    )
    spec = TaskSpec(
        run_dir=str(run_dir),
        data=data,
        distributed=DistributedConfig(platform=jax_platform),
        layout=Layout(local_device_count=1),
    )
    spec = replaced(
        spec, epochs=epochs, steps_per_call=ours.steps_per_call, parallel=ours.parallel, cuda_graphs=cuda_graphs
    )
    paths = RunPaths(run_dir)
    run_dir.mkdir(parents=True)
    paths.config.write_text(spec.to_json())
    start, codecs = time.perf_counter(), os.environ.get(CODECS_PATH)
    try:
        run_task(str(run_dir))
    except Exception as e:  # keep the others' numbers; the table says this one failed
        tb = traceback.format_exc()
        print(f"  {name} FAILED: {type(e).__name__}: {e}\n{tb}", flush=True)
        return {"name": name, "failed": True, "failures": [{"error": f"{e!r}", "traceback": tb}]}
    finally:  # a CPU-decoding run leaves nvImageCodec its CPU codecs only; a `mixed` one after it needs nvJPEG
        os.environ.pop(CODECS_PATH, None)
        os.environ.update({CODECS_PATH: codecs} if codecs else {})
    total_s = time.perf_counter() - start
    per_epoch = read_epochs(paths.metrics)
    rank = json.loads(paths.rank_map.read_text())[0]
    readers, cache = rank["readers_per_device"], rank["resolved"]["decoded_cache_note"]
    print(f"  {ours.name(readers)}: decoded cache {cache}", flush=True)
    return {
        "name": ours.name(readers),
        "parallel": ours.parallel,
        "decoder": ours.decoder,
        "steps_per_call": ours.steps_per_call,
        "readers_per_device": readers,
        "readers_requested": ours.readers,
        "decoded_cache": rank["resolved"]["decoded_cache"],
        "decoded_cache_note": cache,
        "epochs": per_epoch,
        "run_task_s": total_s,
        "setup_s": total_s - sum(e["train_s"] + e["eval_s"] for e in per_epoch),
        "batch_size": spec.step.batch_size,
        "eval_batch_size": rank["resolved"]["eval_batch_per_device"],
        "reader_threads": spec.data.reader_threads,
        "run_dir": str(run_dir),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="Folder with training/ and testing/ Caffe2 LMDBs.")
    parser.add_argument("--epochs", type=int, default=3, help="Epochs for each contender (default 3).")
    parser.add_argument("--out", type=Path, help="Write every number and the command line as JSON here.")
    parser.add_argument("--plot", type=Path, help="Write a PNG chart of the epoch and eval times here (matplotlib).")
    parser.add_argument("--plot-from", type=Path, help="Only redraw --plot from this earlier --out JSON.")
    parser.add_argument(
        "--parallel",
        type=listed(choices=PARALLEL),
        default="sharded",
        help="Our --parallel values to time, e.g. pmap,sharded (default sharded: what the trainer's auto takes for the MLP).",
    )
    parser.add_argument(
        "--decoders",
        type=listed(choices=("auto", "cpu", "mixed")),
        default="auto",
        help="Our --decoder values to time (default auto, the trainer's).",
    )
    parser.add_argument(
        "--steps-per-call",
        type=listed(int),
        default="0",
        help="Our --steps-per-call values to time, e.g. 1,24 (default 0: auto, the trainer's).",
    )
    parser.add_argument(
        "--readers",
        type=listed(int),
        default="0",
        help="Our --readers-per-device values to time, e.g. 1,4 (default 0: the trainer picks).",
    )
    parser.add_argument("--reader-threads", type=int, help="Our DALI threads per pipeline (default: the trainer's).")
    parser.add_argument(
        "--decoded-caches",
        type=listed(),
        default="auto",
        help="Our --decoded-cache values to time, e.g. auto,off: the cache's effect (default auto, the trainer's).",
    )
    parser.add_argument("--skip-example", action="store_true", help="Time only ours.")
    parser.add_argument(
        "--cuda-graphs",
        choices=("auto", "on", "off"),
        default="auto",
        help="Our --cuda-graphs (default auto). One process: XLA's setting is the first "
        "contender's (the example's: on) for all; off turns them off for all.",
    )
    parser.add_argument("--work-dir", type=Path, help="Where ours writes its run directories (default: a temp dir).")
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU pipelines and CPU JAX: checks the script only.")
    args = parser.parse_args(argv)
    if args.plot_from:
        if not args.plot:
            parser.error("--plot-from needs --plot FILE.png")
        return args
    if args.data is None:
        parser.error("--data is required (or --plot-from)")
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    for split in ("training", "testing"):
        if not (args.data / split / "data.mdb").is_file():
            parser.error(
                f"{args.data / split} is no LMDB; make one with "
                f"`dali-launch data prepare --from IDX_DIR --to {args.data}`"
            )
    return args


def contenders(args: argparse.Namespace) -> list[Ours]:
    decoders = [d for d in args.decoders if not args.smoke_cpu or d != "mixed"]  # nvJPEG needs a GPU
    combos = itertools.product(args.parallel, decoders, args.steps_per_call, args.readers, args.decoded_caches)
    return [Ours(*combo) for combo in combos]


def run_all(args: argparse.Namespace) -> list[dict]:
    data, gpu = args.data.absolute(), not args.smoke_cpu
    root = args.work_dir or Path(tempfile.mkdtemp(prefix="epoch-time-"))
    results = []
    if not args.skip_example:
        print("example (NVIDIA's DALI + Flax notebook loop):", flush=True)
        try:
            results.append(run_example(data, args.epochs, gpu))
        except Exception as e:  # still time ours
            tb = traceback.format_exc()
            print(f"  example FAILED: {type(e).__name__}: {e}\n{tb}", flush=True)
            results.append(
                {
                    "name": "example",
                    "failed": True,
                    "failures": [{"error": f"{type(e).__name__}: {e}", "traceback": tb}],
                }
            )
    for ours in contenders(args):
        print(f"ours (run_task): {ours.name(ours.readers or 'auto')}", flush=True)
        results.append(
            run_ours(data, args.epochs, ours, "gpu" if gpu else "cpu", root, args.reader_threads, args.cuda_graphs)
        )
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot_from:
        plot(json.loads(args.plot_from.read_text()), args.plot)
        return 0
    if args.smoke_cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"  # before anything imports JAX
    elif args.cuda_graphs == "off":
        disable_cuda_graphs()
    results = run_all(args)
    for r in results:
        r["summary"] = summarize(r)
    add_ratios(results)
    text = table(results, args.epochs)
    print("\n" + text, flush=True)
    example = next((r for r in results if r["name"] == "example" and not r.get("failed")), None)
    if example:
        print(f"example's eval with the notebook's own (eager) accuracy(): {example['notebook_eager_eval_s']:.2f} s")
    doc = {
        "argv": [sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
        "environment": environment(),
        "epochs": args.epochs,
        "table": text,
        "results": results,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.out}")
    if args.plot:
        plot(doc, args.plot)
    return 1 if any(r.get("failed") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
