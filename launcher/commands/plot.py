"""`dali-launch plot RUN [RUN...] --out PNG`: loss, test accuracy and throughput of several runs, one figure.

The x axis is the global SGD step. Loss and images/s come from the run's TensorBoard events
(every --log-every-steps steps), read with TensorBoard's own reader; a run without them (logged
per epoch only, or older than the events) falls back to its metrics.jsonl epochs. Accuracy is per
epoch. Needs the `plot` extra (matplotlib, tensorboard).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.run_dir import RunPaths, headline, read_jsonl

PANELS = (
    ("train/loss", "train_loss", "training loss"),
    (None, "test", "test"),  # each run's task's headline value (accuracy for classification)
    ("perf/images_per_s", "images_per_s", "images/s"),
)


def curves(paths: RunPaths) -> dict[str, tuple[list[int], list[float]]]:
    """Panel title -> (steps, values) of one run."""
    epochs = read_jsonl(paths.metrics)
    events = _events(paths.tensorboard)
    out = {}
    for tag, key, title in PANELS:
        if tag in events:
            out[title] = events[tag]
        else:
            points = [(m["step"], _value(m, key)) for m in epochs if m.get("step") is not None]
            points = [(step, value) for step, value in points if value is not None]
            out[title] = ([s for s, _ in points], [v for _, v in points])
    return out


def _value(epoch: dict, key: str) -> float | None:
    """An epoch's value for a panel: `test` is its task's headline (run_dir.headline), other keys their own."""
    return headline(epoch)[1] if key == "test" else epoch.get(key)


def _events(folder: Path) -> dict[str, tuple[list[int], list[float]]]:
    if not folder.is_dir():
        return {}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    reader.Reload()
    return {
        tag: ([e.step for e in reader.Scalars(tag)], [e.value for e in reader.Scalars(tag)])
        for tag in reader.Tags()["scalars"]
    }


def plot(
    runs: Annotated[
        list[str],
        typer.Argument(help="Run directories, runs' names as `dali-launch runs` lists them, or --name's (the newest)."),
    ],
    out: Annotated[Path, typer.Option(help="The PNG to write.")] = Path("runs.png"),
    run_root: Annotated[str, typer.Option(help="Folder holding the run directories.")] = "runs",
):
    """Loss, test accuracy and images/s of several runs over SGD steps, on one figure (needs dali-launch[plot])."""
    typer.echo(f"wrote {draw(runs, out, run_root)}")


def draw(runs: list[str], out: Path, run_root: str = "runs") -> Path:
    """Draws every run's curves and writes `out` (PNG)."""
    try:
        import matplotlib
        import tensorboard  # noqa: F401  (the events' reader)
    except ImportError as e:
        raise UsageError(f"dali-launch plot needs {e.name}; pip install 'dali-launch[plot]'") from None
    from dali_launch.launcher.backends.registry import find_run

    paths = [find_run(r, run_root) for r in runs]  # as status finds them: a directory, a name, a job id
    matplotlib.use("Agg")  # files only: no display on a login node
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4), constrained_layout=True)
    for p in paths:
        for ax, (steps, values) in zip(axes, curves(p).values()):
            ax.plot(steps, values, marker="." if len(steps) < 20 else None, label=p.root.name)
    for ax, (_, _, title) in zip(axes, PANELS):
        ax.set_title(title)
        ax.set_xlabel("SGD step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
