#!/usr/bin/env python3
"""Issue 2: epoch time of NVIDIA's DALI + Flax example loop against dali-launch's trainer.

One process, one GPU, the same Caffe2 LMDBs (Fashion-MNIST, from
`dali-launch data prepare --from IDX_DIR --to DIR`):

  example   NVIDIA's "Training neural network with DALI and Flax" notebook, re-implemented as
            written: one `mixed`-decoding pipeline (4 threads), DALI's JAX `DALIGenericIterator`,
            batch 50, a `@jax.jit` train step per batch, a jitted accuracy per test batch.
  ours      `dali_launch.trainer.task.run_task(RUN_DIR)` on a TaskSpec for 1 GPU, once per
            --decoders value; its per-epoch times come from RUN_DIR/metrics.jsonl.

Epoch 0 includes compilation: the table shows it apart and averages epochs 1..N-1.

    python benchmarks/epoch_time.py --data DIR [--epochs 3] [--out results.json]

`--smoke-cpu` runs the same code paths with CPU pipelines and CPU JAX (for checking the script
without a GPU; its numbers mean nothing). A contender that fails is recorded as failed; the others
are still timed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

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

    per_epoch = []
    for epoch in range(epochs):
        start, steps = time.perf_counter(), 0
        for batch in training_iterator:
            model_state = train_step(model_state, batch)
            steps += 1
        jax.block_until_ready(model_state)  # the epoch ends when its last step has run
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        acc = float(accuracy(model_state, validation_iterator))
        eval_s = time.perf_counter() - start
        per_epoch.append({"epoch": epoch, "train_s": train_s, "eval_s": eval_s, "train_samples": steps * batch_size,
                          "test_accuracy": acc, "test_count": int(validation_iterator.size)})
        print(f"  example epoch {epoch}: train {train_s:.2f} s ({steps} steps)  eval {eval_s:.2f} s  "
              f"accuracy {acc:.4f}", flush=True)
    start = time.perf_counter()
    acc_nb = float(accuracy_notebook(model_state, validation_iterator))
    notebook_eval_s = time.perf_counter() - start
    print(f"  example, the notebook's eager accuracy(): {notebook_eval_s:.2f} s (accuracy {acc_nb:.4f})", flush=True)
    return {"name": "example", "setup_s": setup_s, "epochs": per_epoch, "notebook_eager_eval_s": notebook_eval_s,
            "batch_size": batch_size, "eval_batch_size": batch_size, "reader_threads": 4,
            "decoder": "mixed" if gpu else "cpu"}


# --- (b) ours --------------------------------------------------------------------------------

def run_ours(data_dir: Path, epochs: int, decoder: str, jax_platform: str, root: Path,
             reader_threads: int | None, steps_per_call: int) -> dict:
    from dali_launch.trainer.config import DataConfig, DistributedConfig, TaskSpec, TrainConfig
    from dali_launch.trainer.run_dir import RunPaths
    from dali_launch.trainer.task import run_task

    name = f"ours-{decoder}-k{steps_per_call}"
    run_dir = root / name
    data = DataConfig(data_dir=str(data_dir), decoder=decoder,
                      **({"reader_threads": reader_threads} if reader_threads else {}))
    spec = TaskSpec(run_dir=str(run_dir), data=data, train=TrainConfig(epochs=epochs, steps_per_call=steps_per_call),
                    distributed=DistributedConfig(platform=jax_platform, local_device_count=1))
    paths = RunPaths(run_dir)
    run_dir.mkdir(parents=True)
    paths.config.write_text(spec.to_json())
    start = time.perf_counter()
    try:
        run_task(str(run_dir))
    except Exception as e:  # keep the example's numbers; the table says this one failed
        tb = traceback.format_exc()
        print(f"  ours ({decoder}) FAILED: {type(e).__name__}: {e}\n{tb}", flush=True)
        return {"name": name, "failed": True, "failures": [{"error": f"{e!r}", "traceback": tb}]}
    total_s = time.perf_counter() - start
    lines = [json.loads(line) for line in paths.metrics.read_text().splitlines() if line.strip()]
    per_epoch = [{"epoch": m["epoch"], "train_s": m["epoch_time_s"], "eval_s": m["eval_time_s"],
                  "train_samples": m["train_samples"], "test_accuracy": m["test_accuracy"],
                  "test_count": m["test_count"], "train_loss": m["train_loss"]} for m in lines]
    train_epochs = sum(m["train_s"] + m["eval_s"] for m in per_epoch)
    return {"name": name, "decoder": decoder, "steps_per_call": steps_per_call, "epochs": per_epoch, "run_task_s": total_s,
            "setup_s": total_s - train_epochs, "batch_size": spec.train.batch_size,
            "eval_batch_size": spec.train.eval_batch_size, "reader_threads": spec.data.reader_threads,
            "run_dir": str(run_dir)}


# --- the table -------------------------------------------------------------------------------

def summarize(result: dict) -> dict | None:
    epochs = result.get("epochs")
    if not epochs:
        return None
    steady = epochs[1:] or epochs
    mean = lambda key: sum(e[key] for e in steady) / len(steady)  # noqa: E731
    train_s, eval_s = mean("train_s"), mean("eval_s")
    return {"epoch0_train_s": epochs[0]["train_s"], "epoch0_eval_s": epochs[0]["eval_s"], "train_s": train_s,
            "eval_s": eval_s, "train_images_per_s": mean("train_samples") / train_s,
            "eval_images_per_s": mean("test_count") / eval_s, "final_accuracy": epochs[-1]["test_accuracy"],
            "steady_epochs": [e["epoch"] for e in steady], "setup_s": result.get("setup_s")}


def table(results: list[dict], epochs: int) -> str:
    base = next((r.get("summary") for r in results if r["name"] == "example"), None)
    head = (f"{'':<17}{'epoch0 s':>9}{'train s':>9}{'eval s':>8}{'train/ex':>9}{'eval/ex':>8}"
            f"{'train img/s':>13}{'eval img/s':>12}{f'acc@{epochs}':>8}  setup s")
    rows = [head, "-" * len(head)]
    for r in results:
        s = r.get("summary")
        if s is None:
            rows.append(f"{r['name']:<17}FAILED: {r['failures'][-1]['error'][:90]}")
            continue
        ratio_t = f"{s['train_s'] / base['train_s']:.2f}x" if base else "-"
        ratio_e = f"{s['eval_s'] / base['eval_s']:.2f}x" if base else "-"
        rows.append(f"{r['name']:<17}{s['epoch0_train_s']:>9.2f}{s['train_s']:>9.2f}{s['eval_s']:>8.2f}"
                    f"{ratio_t:>9}{ratio_e:>8}{s['train_images_per_s']:>13,.0f}{s['eval_images_per_s']:>12,.0f}"
                    f"{s['final_accuracy']:>8.4f}  {s['setup_s']:.1f}")
    rows.append(f"train s / eval s: mean of epochs 1..{epochs - 1} (epoch 0, with compilation, shown apart); "
                "x/ex = ours / example (<1: faster)")
    rows.append("eval batch: example 50, ours 500 per device; "
                "setup s: pipelines, model init (ours: run_task total minus its epochs)")
    return "\n".join(rows)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="Folder with training/ and testing/ Caffe2 LMDBs.")
    parser.add_argument("--epochs", type=int, default=3, help="Epochs for each contender (default 3).")
    parser.add_argument("--out", type=Path, help="Write every number as JSON here.")
    parser.add_argument("--decoders", default="cpu,mixed", help="Our trainer's --decoder values to time.")
    parser.add_argument("--steps-per-call", default="1", help="Our --steps-per-call values to time, e.g. 1,12.")
    parser.add_argument("--reader-threads", type=int, help="Our DALI threads per pipeline (default: the trainer's).")
    parser.add_argument("--skip-example", action="store_true", help="Time only ours.")
    parser.add_argument("--work-dir", type=Path, help="Where ours writes its run directories (default: a temp dir).")
    parser.add_argument("--smoke-cpu", action="store_true", help="CPU pipelines and CPU JAX: checks the script only.")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    for split in ("training", "testing"):
        if not (args.data / split / "data.mdb").is_file():
            parser.error(f"{args.data / split} is no LMDB; make one with "
                         f"`dali-launch data prepare --from IDX_DIR --to {args.data}`")
    if args.smoke_cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    gpu = not args.smoke_cpu
    decoders = [d for d in args.decoders.split(",") if d and (gpu or d == "cpu")]
    root = args.work_dir or Path(tempfile.mkdtemp(prefix="epoch-time-"))
    data = args.data.absolute()

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
    for decoder in decoders:
        for k in [int(k) for k in args.steps_per_call.split(",")]:
            print(f"ours (run_task, decoder={decoder}, steps_per_call={k}):", flush=True)
            results.append(run_ours(data, args.epochs, decoder, "gpu" if gpu else "cpu", root, args.reader_threads, k))
    for r in results:
        r["summary"] = summarize(r)
    text = table(results, args.epochs)
    print("\n" + text, flush=True)
    example = next((r for r in results if r["name"] == "example"), None)
    if example:
        print(f"example's eval with the notebook's own (eager) accuracy(): {example['notebook_eager_eval_s']:.2f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "epochs": args.epochs, "table": text,
                                        "results": results}, indent=2))
        print(f"wrote {args.out}")
    return 1 if any(r.get("failed") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
