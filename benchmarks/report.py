"""What the benchmark scripts share: a run's metrics read back, summaries and ratios, the table, the chart."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

PARALLEL = ("pmap", "sharded")
OFF_GRAPHS = {"xla_gpu_enable_command_buffer": ""}  # what --cuda-graphs auto sets while nvJPEG runs on the GPU


def read_epochs(metrics: Path) -> list[dict]:
    """A run's metrics.jsonl in the example's per-epoch keys."""
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [
        {
            "epoch": m["epoch"],
            "train_s": m["epoch_time_s"],
            "eval_s": m["eval_time_s"],
            "train_samples": m["train_samples"],
            "test_accuracy": m["test_accuracy"],
            "test_count": m["test_count"],
            "train_loss": m["train_loss"],
            "data_wait_fraction": m["data_wait_fraction"],
            "compile_s": m["compile_s"],
        }
        for m in lines
    ]


def summarize(result: dict) -> dict | None:
    epochs = result.get("epochs")
    if not epochs:
        return None
    steady = epochs[1:] or epochs
    mean = lambda key: sum(e[key] for e in steady) / len(steady)
    train_s, eval_s = mean("train_s"), mean("eval_s")
    return {
        "epoch0_train_s": epochs[0]["train_s"],
        "epoch0_eval_s": epochs[0]["eval_s"],
        "train_s": train_s,
        "eval_s": eval_s,
        "train_images_per_s": mean("train_samples") / train_s,
        "eval_images_per_s": mean("test_count") / eval_s,
        "data_wait_fraction": mean("data_wait_fraction"),
        "compile_s": epochs[0]["compile_s"],
        "final_accuracy": epochs[-1]["test_accuracy"],
        "steady_epochs": [e["epoch"] for e in steady],
        "setup_s": result.get("setup_s"),
    }


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
    head = (
        f"{'':<{width}}{'train s':>8}{'x ex':>7}{'eval s':>8}{'x ex':>7}{'eval0 s':>8}{'train img/s':>12}"
        f"{'data wait':>10}"
        f"{'compile s':>10}{f'acc@{epochs}':>8}{'setup s':>9}"
    )
    rows = [head, "-" * len(head)]
    for r in results:
        s = r.get("summary")
        if s is None:
            rows.append(f"{r['name']:<{width}}FAILED: {r['failures'][-1]['error'][:90]}")
            continue
        rows.append(
            f"{r['name']:<{width}}{s['train_s']:>8.2f}{ratio(s['train_vs_example']):>7}{s['eval_s']:>8.2f}"
            f"{ratio(s['eval_vs_example']):>7}{s['epoch0_eval_s']:>8.2f}{s['train_images_per_s']:>12,.0f}"
            f"{s['data_wait_fraction']:>10.1%}"
            f"{s['compile_s']:>10.2f}{s['final_accuracy']:>8.4f}{s['setup_s']:>9.1f}"
        )
    rows += [
        f"train s, eval s, data wait: means over {steady_label(epochs)}; x ex: time / the example's (<1: faster)",
        "data wait: share of the training epoch spent in the data iterator's next(); compile s: first step until done",
        "eval0 s: epoch 0's evaluation; ours reads the test set through DALI then, and keeps it decoded on "
        "the device after (--eval-cache-mb)",
        "eval batch: example 50, ours 500 per device; "
        "setup s: pipelines, model init (ours: run_task total minus its epochs)",
    ]
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
            bar = ax.barh(
                i + offset,
                s[f"{key}_s"],
                height=0.4,
                color=colour,
                label=("training epoch" if key == "train" else "evaluation") if i == 0 else None,
            )
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
        import flax
        import jax
        import optax

        info.update(
            jax=jax.__version__,
            flax=flax.__version__,
            optax=optax.__version__,
            devices=[str(d) for d in jax.devices()],
            device_kind=jax.devices()[0].device_kind,
        )
        import nvidia.dali  # last: benchmarks/nnx_step.py runs where DALI is not installed

        info["dali"] = nvidia.dali.__version__
    except Exception as e:  # the table matters more than the inventory
        info["error"] = repr(e)
    return info


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


def code_env(tree: Path, folder: Path) -> dict:
    """The environment that runs `tree`'s launcher/ and trainer/ as dali_launch (pyproject's package-dir
    mapping, as links made in `folder`), ahead of any installed copy and of the caller's path (the GPU
    machine's site folder holds DALI and its deps)."""
    package = folder / "dali_launch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for part in ("launcher", "trainer"):
        (package / part).symlink_to(tree.absolute() / part, target_is_directory=True)
    return {"PYTHONPATH": os.pathsep.join(filter(None, (str(folder), os.environ.get("PYTHONPATH"))))}


def checksums(run_dir: Path) -> list | None:
    """A run's parameter checksums (its result.json), None where it wrote none."""
    result = run_dir / "result.json"
    return json.loads(result.read_text()).get("checksums") if result.is_file() else None
