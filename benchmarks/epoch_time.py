#!/usr/bin/env python3
"""Issue 6: the example's DALI + Flax loop against dali-launch's trainer, one process, one GPU, same data.

Both read the same Caffe2 LMDBs (Fashion-MNIST, from `dali-launch data prepare --from IDX_DIR --to DIR`):

  example   NVIDIA's "Training neural network with DALI and Flax" notebook, re-implemented as
            written: one `mixed`-decoding pipeline (4 threads), DALI's JAX `DALIGenericIterator`,
            batch 50, a `@jax.jit` train step per batch, a jitted accuracy per test batch. Only
            timing is added: around the iterator's next() (its data wait) and one
            `jax.block_until_ready` after the very first step (its compile time).
  ours      `dali_launch.trainer.task.run_task(RUN_DIR)` on a TaskSpec for 1 GPU, once per
            combination of --parallel, --decoders, --steps-per-call and --readers, named like
            `ours-pmap-cpu-k24-r4` (r: DALI readers per device, as the trainer resolved it). Its
            numbers come from RUN_DIR/metrics.jsonl and RUN_DIR/rank_map.json.

The table gives per contender: train and eval seconds per epoch (means of epochs 1..N-1: epoch 0
compiles), their ratio to the example's, training images/s, the fraction of the training epoch spent
waiting for data, compile seconds (the first step, its batch in hand, until done), final test
accuracy and set-up seconds.

On the GPU machine (the README's command; --plot needs matplotlib: `pip install 'dali-launch[bench]'`):

    python benchmarks/epoch_time.py --data /tmp/fmnist --epochs 5 --parallel pmap,sharded --reader-threads 4 \
        --steps-per-call 24 --plot benchmarks/results/epoch_time.png --out benchmarks/results/epoch_time.json

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
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from dali_launch.trainer.topology import disable_cuda_graphs

PARALLEL = ("pmap", "sharded")


class Waited:
    """Iterates over `iterable`, summing in `.seconds` the time spent inside its next()."""

    def __init__(self, iterable):
        self.iterator, self.seconds = iter(iterable), 0.0

    def __iter__(self):
        return self

    def __next__(self):
        start = time.perf_counter()
        try:
            return next(self.iterator)
        finally:
            self.seconds += time.perf_counter() - start


# --- (a) the example, as NVIDIA wrote it ------------------------------------------------------

def run_example(data_dir: Path, epochs: int, gpu: bool, batch_size: int = 50) -> dict:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import linen as nn
    from flax.training import train_state
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin import jax as dax

    num_classes = 10
    setup_start = time.perf_counter()

    @pipeline_def(device_id=0 if gpu else None, num_threads=4, seed=0)
    def mnist_pipeline(data_path, random_shuffle):
        jpegs, labels = fn.readers.caffe2(path=data_path, random_shuffle=random_shuffle,
                                          name="mnist_caffe2_reader")
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.GRAY)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.], output_layout="CHW")
        images = fn.reshape(images, shape=[-1])  # Flatten the output image
        if gpu:
            labels = labels.gpu()
        if random_shuffle:
            labels = fn.one_hot(labels, num_classes=num_classes)
        return images, labels

    training_pipeline = mnist_pipeline(data_path=str(data_dir / "training"), random_shuffle=True,
                                       batch_size=batch_size)
    validation_pipeline = mnist_pipeline(data_path=str(data_dir / "testing"), random_shuffle=False,
                                         batch_size=batch_size)
    training_pipeline.build()
    validation_pipeline.build()
    training_iterator = dax.DALIGenericIterator(training_pipeline, output_map=["images", "labels"],
                                                reader_name="mnist_caffe2_reader", auto_reset=True)
    validation_iterator = dax.DALIGenericIterator(validation_pipeline, output_map=["images", "labels"],
                                                  reader_name="mnist_caffe2_reader", auto_reset=True)

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(features=784)(x)
            x = nn.relu(x)
            x = nn.Dense(features=1024)(x)
            x = nn.relu(x)
            x = nn.Dense(features=1024)(x)
            x = nn.relu(x)
            x = nn.Dense(features=10)(x)
            return x

    def create_model_state(rng, learning_rate, momentum):
        cnn = CNN()
        params = cnn.init(rng, jnp.ones([784]))["params"]
        tx = optax.sgd(learning_rate, momentum)
        return train_state.TrainState.create(apply_fn=cnn.apply, params=params, tx=tx)

    @jax.jit
    def train_step(model_state, batch):
        def loss_fn(params):
            logits = model_state.apply_fn({"params": params}, batch["images"])
            return optax.softmax_cross_entropy(logits=logits, labels=batch["labels"]).mean()

        grads = jax.grad(loss_fn)(model_state.params)
        return model_state.apply_gradients(grads=grads)

    @jax.jit
    def correct_in_batch(model_state, batch):
        logits = model_state.apply_fn({"params": model_state.params}, batch["images"])
        return jnp.sum(batch["labels"].ravel() == jnp.argmax(logits, axis=-1))

    def accuracy(model_state, iterator):
        correct_predictions = 0
        for batch in iterator:
            correct_predictions = correct_predictions + correct_in_batch(model_state, batch)
        return correct_predictions / iterator.size

    def accuracy_notebook(model_state, iterator):
        """The notebook's own accuracy(): not jitted, one eager apply per batch."""
        correct_predictions = 0
        for batch in iterator:
            logits = model_state.apply_fn({"params": model_state.params}, batch["images"])
            correct_predictions = correct_predictions + jnp.sum(batch["labels"].ravel() == jnp.argmax(logits, axis=-1))
        return correct_predictions / iterator.size

    rng = jax.random.PRNGKey(0)
    rng, init_rng = jax.random.split(rng)
    model_state = create_model_state(init_rng, 0.1, 0.9)
    jax.block_until_ready(model_state)
    setup_s = time.perf_counter() - setup_start

    per_epoch, compile_s = [], None
    for epoch in range(epochs):
        start, steps = time.perf_counter(), 0
        batches = Waited(training_iterator)  # the notebook's `for batch in training_iterator`, timed
        for batch in batches:
            step_start = time.perf_counter()
            model_state = train_step(model_state, batch)
            if compile_s is None:  # the very first step compiles: wait for it once, to time it
                jax.block_until_ready(model_state)
                compile_s = time.perf_counter() - step_start
            steps += 1
        jax.block_until_ready(model_state)  # the epoch ends when its last step has run
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        acc = float(accuracy(model_state, validation_iterator))
        eval_s = time.perf_counter() - start
        per_epoch.append({"epoch": epoch, "train_s": train_s, "eval_s": eval_s, "train_samples": steps * batch_size,
                          "test_accuracy": acc, "test_count": int(validation_iterator.size),
                          "data_wait_fraction": batches.seconds / train_s,
                          "compile_s": compile_s if epoch == 0 else None})
        print(f"  example epoch {epoch}: train {train_s:.2f} s ({steps} steps, {batches.seconds / train_s:.0%} waiting "
              f"for data)  eval {eval_s:.2f} s  accuracy {acc:.4f}", flush=True)
    start = time.perf_counter()
    acc_nb = float(accuracy_notebook(model_state, validation_iterator))
    notebook_eval_s = time.perf_counter() - start
    print(f"  example, the notebook's eager accuracy(): {notebook_eval_s:.2f} s (accuracy {acc_nb:.4f})", flush=True)
    return {"name": "example", "setup_s": setup_s, "epochs": per_epoch, "notebook_eager_eval_s": notebook_eval_s,
            "batch_size": batch_size, "eval_batch_size": batch_size, "reader_threads": 4,
            "decoder": "mixed" if gpu else "cpu"}


# --- (b) ours --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ours:
    """One configuration of our trainer to time."""
    parallel: str
    decoder: str
    steps_per_call: int
    readers: int  # readers_per_device; 0: the trainer picks

    def name(self, readers: int | str) -> str:
        return f"ours-{self.parallel}-{self.decoder}-k{self.steps_per_call}-r{readers}"


def run_ours(data_dir: Path, epochs: int, ours: Ours, jax_platform: str, root: Path,
             reader_threads: int | None, cuda_graphs: bool = False) -> dict:
    from dali_launch.trainer.config import DataConfig, DistributedConfig, TaskSpec, TrainConfig
    from dali_launch.trainer.run_dir import RunPaths
    from dali_launch.trainer.task import run_task

    name = ours.name(ours.readers or "auto")
    run_dir = root / name
    data = DataConfig(data_dir=str(data_dir), decoder=ours.decoder, readers_per_device=ours.readers,
                      **({"reader_threads": reader_threads} if reader_threads else {}))
    train = TrainConfig(epochs=epochs, steps_per_call=ours.steps_per_call, parallel=ours.parallel,
                        cuda_graphs=cuda_graphs)
    spec = TaskSpec(run_dir=str(run_dir), data=data, train=train,
                    distributed=DistributedConfig(platform=jax_platform, local_device_count=1))
    paths = RunPaths(run_dir)
    run_dir.mkdir(parents=True)
    paths.config.write_text(spec.to_json())
    start = time.perf_counter()
    try:
        run_task(str(run_dir))
    except Exception as e:  # keep the others' numbers; the table says this one failed
        tb = traceback.format_exc()
        print(f"  {name} FAILED: {type(e).__name__}: {e}\n{tb}", flush=True)
        return {"name": name, "failed": True, "failures": [{"error": f"{e!r}", "traceback": tb}]}
    total_s = time.perf_counter() - start
    per_epoch = read_epochs(paths.metrics)
    readers = json.loads(paths.rank_map.read_text())[0]["readers_per_device"]
    return {"name": ours.name(readers), "parallel": ours.parallel, "decoder": ours.decoder,
            "steps_per_call": ours.steps_per_call, "readers_per_device": readers, "readers_requested": ours.readers,
            "epochs": per_epoch, "run_task_s": total_s,
            "setup_s": total_s - sum(e["train_s"] + e["eval_s"] for e in per_epoch),
            "batch_size": spec.train.batch_size, "eval_batch_size": spec.train.eval_batch_size,
            "reader_threads": spec.data.reader_threads, "run_dir": str(run_dir)}


def read_epochs(metrics: Path) -> list[dict]:
    """A run's metrics.jsonl in the example's per-epoch keys."""
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [{"epoch": m["epoch"], "train_s": m["epoch_time_s"], "eval_s": m["eval_time_s"],
             "train_samples": m["train_samples"], "test_accuracy": m["test_accuracy"], "test_count": m["test_count"],
             "train_loss": m["train_loss"], "data_wait_fraction": m["data_wait_fraction"], "compile_s": m["compile_s"]}
            for m in lines]


# --- the numbers, the table, the chart ----------------------------------------------------------

def summarize(result: dict) -> dict | None:
    epochs = result.get("epochs")
    if not epochs:
        return None
    steady = epochs[1:] or epochs
    mean = lambda key: sum(e[key] for e in steady) / len(steady)  # noqa: E731
    train_s, eval_s = mean("train_s"), mean("eval_s")
    return {"epoch0_train_s": epochs[0]["train_s"], "epoch0_eval_s": epochs[0]["eval_s"], "train_s": train_s,
            "eval_s": eval_s, "train_images_per_s": mean("train_samples") / train_s,
            "eval_images_per_s": mean("test_count") / eval_s, "data_wait_fraction": mean("data_wait_fraction"),
            "compile_s": epochs[0]["compile_s"], "final_accuracy": epochs[-1]["test_accuracy"],
            "steady_epochs": [e["epoch"] for e in steady], "setup_s": result.get("setup_s")}


def add_ratios(results: list[dict]) -> None:
    """Each summary's train and eval time over the example's (<1: faster); None without an example."""
    base = next((r.get("summary") for r in results if r["name"] == "example"), None)
    for s in (r["summary"] for r in results if r.get("summary")):
        s["train_vs_example"] = s["train_s"] / base["train_s"] if base else None
        s["eval_vs_example"] = s["eval_s"] / base["eval_s"] if base else None


def steady_label(epochs: int) -> str:
    """The epochs the means are over: all but epoch 0, which compiles, unless it is the only one."""
    return {1: "epoch 0 (the only one)", 2: "epoch 1"}.get(epochs, f"epochs 1..{epochs - 1}")


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(results: list[dict], epochs: int) -> str:
    width = max(len(r["name"]) for r in results) + 2
    head = (f"{'':<{width}}{'train s':>8}{'x ex':>7}{'eval s':>8}{'x ex':>7}{'eval0 s':>8}{'train img/s':>12}"
            f"{'data wait':>10}"
            f"{'compile s':>10}{f'acc@{epochs}':>8}{'setup s':>9}")
    rows = [head, "-" * len(head)]
    for r in results:
        s = r.get("summary")
        if s is None:
            rows.append(f"{r['name']:<{width}}FAILED: {r['failures'][-1]['error'][:90]}")
            continue
        rows.append(f"{r['name']:<{width}}{s['train_s']:>8.2f}{ratio(s['train_vs_example']):>7}{s['eval_s']:>8.2f}"
                    f"{ratio(s['eval_vs_example']):>7}{s['epoch0_eval_s']:>8.2f}{s['train_images_per_s']:>12,.0f}"
                    f"{s['data_wait_fraction']:>10.1%}"
                    f"{s['compile_s']:>10.2f}{s['final_accuracy']:>8.4f}{s['setup_s']:>9.1f}")
    rows += [f"train s, eval s, data wait: means over {steady_label(epochs)}; "
             "x ex: time / the example's (<1: faster)",
             "data wait: share of the training epoch spent in the data iterator's next(); "
             "compile s: first step until done",
             "eval0 s: epoch 0's evaluation; ours reads the test set through DALI then, and keeps it decoded on "
             "the device after (--eval-cache-mb)",
             "eval batch: example 50, ours 500 per device; "
             "setup s: pipelines, model init (ours: run_task total minus its epochs)"]
    return "\n".join(rows)


def plot(doc: dict, path: Path) -> None:
    """One bar group per contender: train and eval seconds per epoch, labelled with the ratio to the example."""
    import matplotlib

    matplotlib.use("Agg")  # no display on the GPU machine
    import matplotlib.pyplot as plt

    results = doc["results"]
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.8 * len(results)), layout="constrained")
    for i, r in enumerate(results):
        s = r.get("summary")
        if s is None:
            ax.text(0, i, " FAILED", va="center")
            continue
        for offset, key, colour in ((-0.2, "train", "tab:blue"), (0.2, "eval", "tab:orange")):
            bar = ax.barh(i + offset, s[f"{key}_s"], height=0.4, color=colour,
                          label=("training epoch" if key == "train" else "evaluation") if i == 0 else None)
            ax.bar_label(bar, labels=[f"{s[f'{key}_s']:.2f} s  ({ratio(s[f'{key}_vs_example'])})"], padding=3)
    ax.set_yticks(range(len(results)), [r["name"] for r in results])
    ax.invert_yaxis()  # the example on top
    ax.margins(x=0.25)
    ax.set_xlabel(f"seconds, mean over {steady_label(doc['epochs'])} (in brackets: time / the example's)")
    device = doc.get("environment", {}).get("device_kind", "unknown device")
    ax.set_title(f"Epoch time on {device}: the example against ours, {doc['epochs']} epochs each")
    fig.legend(loc="outside lower center", ncols=2, frameon=False)  # clear of the bars' labels
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def environment() -> dict:
    info = {"python": platform.python_version(), "host": platform.node()}
    try:
        import jax
        import flax
        import optax
        import nvidia.dali

        info.update(jax=jax.__version__, flax=flax.__version__, optax=optax.__version__,
                    dali=nvidia.dali.__version__, devices=[str(d) for d in jax.devices()],
                    device_kind=jax.devices()[0].device_kind)
    except Exception as e:  # the table matters more than the inventory
        info["error"] = repr(e)
    return info


# --- the command -------------------------------------------------------------------------------

def listed(kind=str, choices: tuple = ()):
    """An argparse type for comma lists, e.g. `pmap,sharded`."""
    def parse(text: str) -> list:
        values = [kind(v) for v in text.split(",") if v]
        bad = [v for v in values if choices and v not in choices]
        if bad or not values:
            of = f" of {', '.join(choices)}" if choices else ""
            raise argparse.ArgumentTypeError(f"{text!r}: want a comma list{of}")
        return values
    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="Folder with training/ and testing/ Caffe2 LMDBs.")
    parser.add_argument("--epochs", type=int, default=3, help="Epochs for each contender (default 3).")
    parser.add_argument("--out", type=Path, help="Write every number and the command line as JSON here.")
    parser.add_argument("--plot", type=Path, help="Write a PNG chart of the epoch and eval times here (matplotlib).")
    parser.add_argument("--plot-from", type=Path, help="Only redraw --plot from this earlier --out JSON.")
    parser.add_argument("--parallel", type=listed(choices=PARALLEL), default="pmap,sharded",
                        help="Our --parallel values to time (default pmap,sharded).")
    parser.add_argument("--decoders", type=listed(choices=("auto", "cpu", "mixed")), default="cpu",
                        help="Our --decoder values to time (default cpu).")
    parser.add_argument("--steps-per-call", type=listed(int), default="24",
                        help="Our --steps-per-call values to time, e.g. 1,24 (default 24, the README's for GPUs).")
    parser.add_argument("--readers", type=listed(int), default="0",
                        help="Our --readers-per-device values to time, e.g. 1,4 (default 0: the trainer picks).")
    parser.add_argument("--reader-threads", type=int, help="Our DALI threads per pipeline (default: the trainer's).")
    parser.add_argument("--skip-example", action="store_true", help="Time only ours.")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="Let XLA use CUDA graphs in both contenders (ours: --cuda-graphs; off by default).")
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
            parser.error(f"{args.data / split} is no LMDB; make one with "
                         f"`dali-launch data prepare --from IDX_DIR --to {args.data}`")
    return args


def contenders(args: argparse.Namespace) -> list[Ours]:
    decoders = [d for d in args.decoders if not args.smoke_cpu or d != "mixed"]  # nvJPEG needs a GPU
    return [Ours(*combo) for combo in itertools.product(args.parallel, decoders, args.steps_per_call, args.readers)]


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
            results.append({"name": "example", "failed": True,
                            "failures": [{"error": f"{type(e).__name__}: {e}", "traceback": tb}]})
    for ours in contenders(args):
        print(f"ours (run_task): {ours.name(ours.readers or 'auto')}", flush=True)
        results.append(run_ours(data, args.epochs, ours, "gpu" if gpu else "cpu", root, args.reader_threads,
                                args.cuda_graphs))
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot_from:
        plot(json.loads(args.plot_from.read_text()), args.plot)
        return 0
    if args.smoke_cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"  # before anything imports JAX
    elif not args.cuda_graphs:  # both contenders as dali-launch runs GPUs by default
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
    doc = {"argv": [sys.argv[0], *(sys.argv[1:] if argv is None else argv)], "environment": environment(),
           "epochs": args.epochs, "table": text, "results": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.out}")
    if args.plot:
        plot(doc, args.plot)
    return 1 if any(r.get("failed") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
