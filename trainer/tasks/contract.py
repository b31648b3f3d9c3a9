"""The task contract, for `--task package.module:name`: a training job of your own, beside its model and pipeline.

It imports neither JAX nor DALI, so a task module can import it at no cost:

    from dali_launch.trainer.tasks.contract import Task

    def loss(step, batch):                      # one SGD step's batch of this device (or of the job, under jit)
        predicted = step.model(batch["images"])  # the model, training: dropout on, BatchNorm statistics moving
        error = ((predicted - batch["targets"]) ** 2).mean(-1)
        return (error * step.valid).sum(), {"abs_error": (abs(predicted - batch["targets"]).mean(-1) * step.valid).sum()}

    def evaluate(step, batch):                   # one test batch; `step.model` evaluates (dropout off)
        error = ((step.model(batch["images"]) - batch["targets"]) ** 2).mean(-1)
        return {"squared_error": (error * step.valid).sum()}

    regression = Task(outputs=("images", "targets"), loss=loss, evaluate=evaluate, headline="squared_error")

A `Task` names its pipeline's outputs (as many as it needs, any names; the pipeline returns one DataNode for each,
in this order)
and gives two pure JAX functions of a `step` (the view below) and a `batch` (a dict of those outputs, a leading
axis of samples):
- `loss(step, batch)`: the loss of the batch summed over its real samples (weight each sample by `step.valid`:
  1 for a real sample, 0 for padding), a scalar; or (that sum, {name: sum}) with training metrics, each a
  scalar summed the same way. The step sums them over the job and divides by the job's real samples, so the
  mean stays exact under padding, any mesh and gradient accumulation; training metrics are reported as such
  means each epoch (checkpoints keep their sums: a resumed epoch's are the whole epoch's).
- `evaluate(step, batch)`: {name: sum} over the batch's real samples, scalars or arrays of a fixed shape (a
  confusion matrix, per-class counts); summed over the whole test set on every device of every process.
  `summary(sums)` turns the totals (with `count`, the real samples) into the reported values: by default each
  sum over `count`. `headline` names the value the epoch line, `status` and `runs` show; `better` says which way
  it improves, "higher" or "lower" (`runs`' and `status`' best epoch is the best by it); left out, a headline
  whose name holds loss, error, mse, mae, nll, perplexity or distance is lower-is-better, any other higher.

The `step` view (trainer/step/view.py makes it):
- `step.model(x)`: the model applied to `x` (its rows: samples), training or evaluating as the call is;
- `step.valid`: the batch's (rows,) mask of real samples;
- `step.gather(x)`: `x`'s rows of every device of the job, this device's first (under jit the batch is the
  job's already): what a loss whose negatives span the job's batch gathers (gradients flow back);
- `step.key`: a PRNG key of this step and device (the same again in a resumed run);
- `step.per_device(fn, *xs)`: `fn(key, *x_rows)` on each device's own rows with that device's key, so that
  --parallel pmap and sharded make the same steps (what mixing a device's batch needs).
`inputs` names the output the model is initialised on (one sample of it); `pipeline` and `model` are what
--pipeline and --model default to for the task (a built-in task's own). `bounds` (optional) is one `Bounds`:
integer values of the batch whose smallest and largest are tracked on the device, and the check the host makes
of them at the loop's sync points and after each evaluation, to refuse bad labels in one line -- for class ids,
tasks/classification.py's `bounded_class_ids("labels", num_classes)` (a task written with the earlier three fields, `bounds=values,
bounded=names, check_bounds=check`, is read as the same Bounds);
`check_model(name, outputs)` (optional) sees the model's outputs on one sample (abstract: shapes and dtypes)
before anything is computed, to refuse a model that cannot serve the task. `options` are what
`dali-launch` passes a task factory that names them (as a model factory's): `num_classes`, `label_smoothing`,
`mixup`, `cutmix`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, dataclass

OPTIONS = ("num_classes", "label_smoothing", "mixup", "cutmix")  # settings a task factory may name
LOWER_IS_BETTER = ("loss", "error", "mse", "mae", "nll", "perplexity", "distance")  # in a headline's name
DIRECTIONS = ("higher", "lower")


def better_of(name: str) -> str:
    """Which way a headline named `name` improves where its task does not say (`Task.better` left out): "lower"
    where the name holds one of LOWER_IS_BETTER (test_mse, abs_error, bit_error), else "higher"."""
    return "lower" if any(word in name.lower() for word in LOWER_IS_BETTER) else "higher"


def ratios(sums: dict) -> dict:
    """The default summary: each evaluation sum over the real samples counted (`count`)."""
    count = sums["count"]
    return {name: value / count if count else 0.0 for name, value in sums.items() if name != "count"}


@dataclass(frozen=True)
class Bounds:
    """Integer values of a batch whose range the host checks: `values(batch)` gives {name: integer array, or None
    where there is nothing to bound} for each of `names` (inside the step: each one's smallest and largest are
    tracked on the device, no sync), and `check(low, high, split, pipeline)` raises the one-line error for the
    smallest and largest seen ({name: int} each; `split`: training or testing, `pipeline`: --pipeline)."""

    names: tuple[str, ...]
    values: Callable
    check: Callable


@dataclass(frozen=True)
class Task:
    outputs: tuple[str, ...]
    loss: Callable
    evaluate: Callable
    summary: Callable[[dict], dict] = ratios
    headline: str = ""  # the summary's value that the epoch line shows; "" takes its first
    better: str = ""  # which way the headline improves: "higher" or "lower"; "" by its name (better_of)
    inputs: str = ""  # the output the model is initialised on; "" takes the first
    unit: str = "samples"  # what the test set's count counts, for the epoch line
    pipeline: str = ""  # the --pipeline a run of this task takes where none is given ("": the flag's default)
    model: str = ""  # likewise --model
    metrics: tuple[str, ...] = ()  # the names of the training metrics `loss` returns beside its sum
    bounds: Bounds | None = None  # integer values whose range is checked (class ids), or None
    check_model: Callable | None = None  # (model name, its outputs on one sample, abstract) -> refuse in one line
    # the earlier form of `bounds`: bounds=values, bounded=names, check_bounds=check (read as one Bounds)
    bounded: InitVar[tuple[str, ...]] = ()
    check_bounds: InitVar[Callable | None] = None

    def __post_init__(self, bounded: tuple[str, ...], check_bounds: Callable | None):
        if bounded or check_bounds or (self.bounds is not None and not isinstance(self.bounds, Bounds)):
            if not (bounded and callable(self.bounds) and callable(check_bounds)):
                given = ", ".join(
                    n for n, v in (("bounds", self.bounds), ("bounded", bounded), ("check_bounds", check_bounds)) if v
                )
                raise ValueError(
                    f"Task({given}=...) without the rest: give bounds, bounded and check_bounds together, or "
                    f"bounds=Bounds(names, values, check)"
                )
            object.__setattr__(self, "bounds", Bounds(tuple(bounded), self.bounds, check_bounds))
        if not self.outputs or len(set(self.outputs)) != len(self.outputs) or "valid" in self.outputs:
            raise ValueError(f"Task(outputs={self.outputs!r}): give distinct names, other than 'valid'")
        if self.inputs and self.inputs not in self.outputs:
            raise ValueError(f"Task(inputs={self.inputs!r}) is not one of its outputs {self.outputs}")
        if self.better and self.better not in DIRECTIONS:
            raise ValueError(f'Task(better={self.better!r}): give "higher" or "lower" (or leave it out)')

    @property
    def model_input(self) -> str:
        return self.inputs or self.outputs[0]

    def headline_of(self, summary: dict) -> str:
        return self.headline or next(iter(summary), "")

    def better_for(self, headline: str) -> str:
        """Which way `headline` (headline_of's) improves: the task's word, else its name's (better_of)."""
        return self.better or better_of(headline)
