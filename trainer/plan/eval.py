"""The evaluation's decisions: who evaluates, in batches of what size, read by how many pipelines per device.

evaluates        every process under --eval-on all (each reads its devices' shards of the test set and one
                 all-gather sums the counts), else process 0 alone
eval_batch       --eval-batch-size auto: on GPUs training's batch per device and step, whose convolutions and
                 GEMMs XLA has then autotuned already in this process (at 500 the cold ResNet-50 evaluation
                 compiled for 10.9 s, autotuning its own; at 256, 3.9 s, in the epoch's shadow); on CPUs, which
                 do not autotune, EVAL_CPU_BATCH (fewer, larger steps)
eval_readers     DALI pipelines per device for the test split, by plan/data.py's rule for that batch
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.config import TaskSpec
from dali_launch.trainer.plan.data import readers_per_device
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.settings.eval import EVAL_CPU_BATCH


@dataclass(frozen=True)
class EvalPlan:
    eval_batch_per_device: int
    eval_readers_per_device: int
    evaluates: bool  # this process evaluates


def plan_eval(spec: TaskSpec, facts: Facts, data, step) -> EvalPlan:
    """The evaluation's decisions, after the data plan's (`data`: its decoder and threads) and the step's batch."""
    batch = eval_batch_size(spec.eval.eval_batch_size, facts.platform, step.batch_per_device_step)
    readers = readers_per_device(
        spec.data.readers_per_device, data.reader_threads, facts.platform, data.decoder, batch, facts.cores_per_device
    )
    return EvalPlan(batch, readers, evaluates(spec.eval.eval_on, facts.process_index))


def eval_batch_size(setting: int, platform: str, train_batch: int) -> int:
    """--eval-batch-size, 0 (auto) decided by the rule above."""
    if setting:
        return setting
    return train_batch if platform == "gpu" else EVAL_CPU_BATCH


def evaluates(eval_on: str, process_index: int) -> bool:
    """Whether this process evaluates: every process under --eval-on all, else process 0 alone."""
    return eval_on == "all" or process_index == 0
