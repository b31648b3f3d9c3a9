"""User models for the tests, found through PYTHONPATH=tests as a user's package would be: state
(BatchNorm statistics) and randomness (dropout), the contract's new parts (trainer/model/models.py); and
small stand-ins for the built-in models, cheap on two CPU cores."""

from __future__ import annotations

import flax.linen as nn

from dali_launch.trainer.model.resnet import ResNet
from dali_launch.trainer.model.vit import ViT


class BatchNormDropoutMLP(nn.Module):
    """docs/models.md's example of a model with BatchNorm and dropout."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool):
        x = x.reshape(x.shape[0], -1)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(nn.Dense(256)(x))
        x = nn.Dropout(0.2, deterministic=not train)(nn.relu(x))
        return nn.Dense(self.num_classes)(x)


def tiny_resnet(num_classes: int) -> ResNet:
    """resnet50's blocks, one per stage, three stages of 8, 16 and 32 filters: cheap on two CPU cores."""
    return ResNet(num_classes=num_classes, stages=(1, 1, 1), width=8)


def tiny_vit(num_classes: int) -> ViT:
    """The built-in ViT's blocks (so --mesh's tensor rules split them as vit-s16's), 12 of width 128 with 2 heads:
    2.5 M parameters against vit-s16's 21.7 M, each block array still large enough for the fsdp axis."""
    return ViT(num_classes=num_classes, width=128, depth=12, mlp_dim=512, num_heads=2)


class TinyBatchNormMLP(nn.Module):
    """Every part of a train state in a few kilobytes: BatchNorm statistics and dropout. tests/golden/old-run (a run
    directory written by an earlier version, its config and checkpoint kept as they were) trained it."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool):
        x = x.reshape(x.shape[0], -1)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(nn.Dense(16)(x))
        x = nn.Dropout(0.1, deterministic=not train)(nn.relu(x))
        return nn.Dense(self.num_classes)(x)
