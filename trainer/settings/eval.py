"""The evaluation: where it runs, its batch, what it keeps, which parameters it reads.

The [eval] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt

EVAL_CPU_BATCH = 500  # --eval-batch-size auto on CPUs (resolve.eval_batch_size)


@dataclass(frozen=True)
class EvalConfig:
    eval_ema: bool = opt(
        False,
        "Evaluate the --ema-decay average instead of the trained parameters.",
    )
    eval_batch_size: int = opt(
        0,
        "Test samples per device per evaluation step (0: auto).",
        details=(
            "Test samples per device per evaluation step, at most: smaller test shards take one step of their size. "
            "0: auto: on GPUs the training batch per device and step, so the evaluation's compile reuses training's "
            "autotuning; on CPUs 500. The value "
            "used is in rank_map.json."
        ),
    )
    eval_on: str = opt(
        "all",
        "Which devices evaluate: all, or process-0.",
        details=(
            "Which devices evaluate: all (every device of every process reads its shard of the test set; the "
            "counts are summed once and process 0 reports) or process-0 (process 0's devices alone, the others "
            "wait: with one task per GPU that is 1 of N GPUs)."
        ),
        choices=("all", "process-0"),
        on_resume="may change",
    )
    eval_cache_mb: int = opt(
        1024,
        "Keep the decoded test set on the devices up to this many MiB (0: off).",
        details=(
            "Keep the decoded test set on the devices after the first evaluation when it takes at most this "
            "many MiB per device; later evaluations skip DALI. 0: read it through DALI every time."
        ),
        on_resume="may change",
    )
