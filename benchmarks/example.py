"""NVIDIA's "DALI + Flax" example as the notebook writes it, for the benchmarks to time beside ours.

    run_example           the single-GPU loop: one `mixed`-decoding pipeline (4 threads), DALI's
                          JAX `DALIGenericIterator`, batch 50, a `@jax.jit` step per batch, a jitted
                          accuracy per test batch (epoch_time.py)
    run_example_two_gpus  its multi-GPU section: one pipeline per GPU, a pmapped step with *no*
                          gradient averaging, global batch 200 (multi_gpu.py)

Only timing is added: around the iterator's next() (data wait) and one `jax.block_until_ready`
after the very first step (compile time).
"""

from __future__ import annotations

import time
from pathlib import Path


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
        jpegs, labels = fn.readers.caffe2(path=data_path, random_shuffle=random_shuffle, name="mnist_caffe2_reader")
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.GRAY)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
        images = fn.reshape(images, shape=[-1])  # Flatten the output image
        if gpu:
            labels = labels.gpu()
        if random_shuffle:
            labels = fn.one_hot(labels, num_classes=num_classes)
        return images, labels

    training_pipeline = mnist_pipeline(data_path=str(data_dir / "training"), random_shuffle=True, batch_size=batch_size)
    validation_pipeline = mnist_pipeline(
        data_path=str(data_dir / "testing"), random_shuffle=False, batch_size=batch_size
    )
    training_pipeline.build()
    validation_pipeline.build()
    training_iterator = dax.DALIGenericIterator(
        training_pipeline, output_map=["images", "labels"], reader_name="mnist_caffe2_reader", auto_reset=True
    )
    validation_iterator = dax.DALIGenericIterator(
        validation_pipeline, output_map=["images", "labels"], reader_name="mnist_caffe2_reader", auto_reset=True
    )

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
        per_epoch.append(
            {
                "epoch": epoch,
                "train_s": train_s,
                "eval_s": eval_s,
                "train_samples": steps * batch_size,
                "test_accuracy": acc,
                "test_count": int(validation_iterator.size),
                "data_wait_fraction": batches.seconds / train_s,
                "compile_s": compile_s if epoch == 0 else None,
            }
        )
        print(
            f"  example epoch {epoch}: train {train_s:.2f} s ({steps} steps, {batches.seconds / train_s:.0%} waiting "
            f"for data)  eval {eval_s:.2f} s  accuracy {acc:.4f}",
            flush=True,
        )
    start = time.perf_counter()
    acc_nb = float(accuracy_notebook(model_state, validation_iterator))
    notebook_eval_s = time.perf_counter() - start
    print(f"  example, the notebook's eager accuracy(): {notebook_eval_s:.2f} s (accuracy {acc_nb:.4f})", flush=True)
    return {
        "name": "example",
        "setup_s": setup_s,
        "epochs": per_epoch,
        "notebook_eager_eval_s": notebook_eval_s,
        "batch_size": batch_size,
        "eval_batch_size": batch_size,
        "reader_threads": 4,
        "decoder": "mixed" if gpu else "cpu",
    }


def run_example_two_gpus(data_dir: Path, epochs: int, global_batch: int = 200, gpu: bool = True) -> dict:
    """The notebook's multi-GPU section; gpu=False: CPU pipelines on two CPU devices (checks the code path)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import jax_utils
    from flax import linen as nn
    from flax.training import train_state
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin import jax as dax

    gpus = jax.devices()[:2]
    per_gpu = global_batch // len(gpus)

    @pipeline_def(num_threads=4, seed=0)
    def mnist_pipeline(data_path, random_shuffle, shard_id, num_shards):
        jpegs, labels = fn.readers.caffe2(
            path=data_path,
            random_shuffle=random_shuffle,
            name="mnist_caffe2_reader",
            shard_id=shard_id,
            num_shards=num_shards,
        )
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.GRAY)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, std=[255.0], output_layout="CHW")
        images = fn.reshape(images, shape=[-1])
        labels = labels.gpu() if gpu else labels
        return images, (fn.one_hot(labels, num_classes=10) if random_shuffle else labels)

    def iterator(split, shuffle):
        pipes = [
            mnist_pipeline(
                data_path=str(data_dir / split),
                random_shuffle=shuffle,
                shard_id=i,
                num_shards=len(gpus),
                batch_size=per_gpu,
                device_id=i if gpu else None,
            )
            for i in range(len(gpus))
        ]
        for p in pipes:
            p.build()
        batches = dax.DALIGenericIterator(
            pipes, ["images", "labels"], reader_name="mnist_caffe2_reader", auto_reset=True
        )
        if gpu:  # each pipeline's output is on its own GPU already
            return batches

        class OnEachDevice:  # CPU pipelines' outputs land on device 0: as host arrays, pmap splits them itself
            def __iter__(self):
                return ({k: np.asarray(v) for k, v in batch.items()} for batch in batches)

        return OnEachDevice()

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for width in (784, 1024, 1024):
                x = nn.relu(nn.Dense(width)(x))
            return nn.Dense(10)(x)

    model = MLP()
    state = train_state.TrainState.create(
        apply_fn=model.apply,
        params=model.init(jax.random.PRNGKey(0), jnp.ones([784]))["params"],
        tx=optax.sgd(0.1, 0.9),
    )
    state = jax_utils.replicate(state, devices=gpus)

    def train_step(state, batch):  # as in the notebook: no pmean, each replica on its own
        grads = jax.grad(
            lambda p: optax.softmax_cross_entropy(
                state.apply_fn({"params": p}, batch["images"]), batch["labels"]
            ).mean()
        )(state.params)
        return state.apply_gradients(grads=grads)

    p_train = jax.pmap(train_step, devices=gpus)
    p_correct = jax.pmap(
        lambda s, b: jnp.sum(b["labels"].ravel() == jnp.argmax(s.apply_fn({"params": s.params}, b["images"]), -1)),
        devices=gpus,
    )
    train_it, test_it = iterator("training", True), iterator("testing", False)
    epochs_out = []
    for epoch in range(epochs):
        start = time.perf_counter()
        for batch in train_it:
            state = p_train(state, batch)
        jax.block_until_ready(state)
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        correct = sum(int(c.sum()) for c in (p_correct(state, b) for b in test_it))
        eval_s = time.perf_counter() - start
        epochs_out.append({"epoch": epoch, "train_s": train_s, "eval_s": eval_s, "test_accuracy": correct / 10_000})
        print(
            f"  example epoch {epoch}: train {train_s:.2f} s  eval {eval_s:.2f} s  accuracy (replica 0 + 1 "
            f"halves) {correct / 10_000:.4f}",
            flush=True,
        )
    return {"name": "example 1 proc x 2 GPU (no averaging)", "epochs": epochs_out}
