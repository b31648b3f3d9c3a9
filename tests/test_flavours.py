"""DALI and JAX CUDA builds must agree; the message says exactly what to install."""

import pytest

from dali_launch.trainer import flavours
from dali_launch.trainer.errors import UsageError


@pytest.mark.parametrize(
    "dali, jax_cuda, flavour",
    [
        ({"nvidia-dali-cuda120": 12}, {}, "cpu"),
        ({"nvidia-dali-cuda120": 12}, {"jax-cuda12-plugin": 12}, "cuda12"),
        ({"nvidia-dali-cuda130": 13}, {"jax-cuda13-plugin": 13}, "cuda13"),
    ],
)
def test_matching_builds(dali, jax_cuda, flavour):
    assert flavours.check(dali, jax_cuda) == flavour


@pytest.mark.parametrize(
    "dali, jax_cuda, message",
    [
        (
            {"nvidia-dali-cuda120": 12},
            {"jax-cuda13-plugin": 13},
            "nvidia-dali-cuda120 (CUDA 12) does not match jax-cuda13-plugin (CUDA 13); "
            "pip uninstall -y nvidia-dali-cuda120 && pip install 'dali-launch[cuda13]'",
        ),
        ({"nvidia-dali-cuda120": 12, "nvidia-dali-cuda130": 13}, {}, "share one module"),
        ({}, {}, "DALI is not installed"),
    ],
)
def test_mismatches(dali, jax_cuda, message):
    with pytest.raises(
        UsageError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")
    ):
        flavours.check(dali, jax_cuda)


def test_this_environment_is_consistent():
    assert flavours.check() in ("cpu", "cuda12", "cuda13")
