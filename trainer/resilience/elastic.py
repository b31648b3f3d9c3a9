"""Elastic resume: how a checkpoint continues on this job's device count, in either sample order.

A checkpoint records the epoch, the position reached in it (a global order's position, or the calls
of the shard order's pipelines done), the global batch and --steps-per-call it ran with, the first
segment's global batch, and the data set's fingerprint. On another device count D:
  keep     (--elastic-batch, default) the global batch B stays: the per-device batch becomes B / D,
           which must divide; the same SGD steps, the same learning rate.
  rescale  the per-device batch b stays: B' = b × D, and the learning rate is the run's
           --learning-rate × B' / (the first segment's B), the linear scaling rule (Goyal et al. 2017);
           refused with --accumulate-steps > 1 (no exact rule for a group cut mid-way).
--steps-per-call stays the checkpoint's, so with `keep` every call covers the same positions (global
order) or the epochs keep their length (shard order: the rest of an interrupted epoch is read as
data/hosting.py says, under the same rule).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dali_launch.trainer.errors import UsageError


@dataclass(frozen=True)
class Plan:
    """How this job runs on from a global-order checkpoint."""

    rule: str  # keep or rescale
    batch_per_device_step: int
    steps_per_call: int
    lr_scale: float  # times --learning-rate
    global_batch: int
    first_global_batch: int
    devices_before: int
    devices: int

    @property
    def changed(self) -> bool:
        return self.devices != self.devices_before

    def describe(self) -> str:
        if not self.changed:
            return ""
        if self.rule == "keep":
            return (
                f"elastic resume: {self.devices_before} -> {self.devices} devices, global batch {self.global_batch} "
                f"kept ({self.batch_per_device_step} per device), learning rate unchanged"
            )
        return (
            f"elastic resume: {self.devices_before} -> {self.devices} devices, {self.batch_per_device_step} per "
            f"device kept: global batch {self.global_batch}, learning rate x{self.lr_scale:g} "
            f"({self.global_batch}/{self.first_global_batch})"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def plan(order: dict, devices: int, rule: str, accumulate_steps: int = 1) -> Plan:
    """`order` is a checkpoint's record (checkpoint.py); raises UsageError when the batch cannot be kept,
    or rescaled exactly."""
    before, batch, k = order["devices"], order["global_batch"], order["steps_per_call"]
    first = order.get("first_global_batch", batch)
    if rule == "rescale":
        new = batch // before * devices
        if new != batch and accumulate_steps > 1:
            _refuse_rescaled_groups(batch, devices, accumulate_steps)
    elif batch % devices:
        raise UsageError(
            f"the run's global batch {batch} cannot be split over {devices} devices; resume on a device count "
            f"that divides it ({', '.join(map(str, divisors(batch)))}), or add --elastic-batch rescale"
        )
    else:
        new = batch
    return Plan(rule, new // devices, k, new / first, new, first, before, devices)


def _refuse_rescaled_groups(batch: int, devices: int, accumulate_steps: int) -> None:
    """An update of --accumulate-steps is one step of a batch that many times larger: resized mid-group,
    it would mix two batch sizes, and the groups (counted in steps) would no longer start where the
    schedule's epochs do. No exact rule exists, so say what does work."""
    raise UsageError(
        f"--elastic-batch rescale cannot continue --accumulate-steps {accumulate_steps} on {devices} devices "
        f"(its updates are groups of {accumulate_steps} steps of {batch} samples); resume with --elastic-batch "
        f"keep on a device count that divides {batch} ({', '.join(map(str, divisors(batch)))})"
    )


def divisors(n: int, most: int = 64) -> list[int]:
    """Device counts that split `n` evenly, up to `most`."""
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]
