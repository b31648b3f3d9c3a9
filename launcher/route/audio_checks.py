"""The pure checks of the audio settings and of what --pipeline audio cannot take, before anything is written:
the settings' ranges (data/spectrograms.py says them), image augmentation and a decoded cache (it makes its own
masks, and decodes its sounds every epoch), and a ViT whose patches do not tile the spectrogram."""

from __future__ import annotations

from dali_launch.launcher.route.recipe_checks import is_vit
from dali_launch.launcher.run_config import RunConfig
from dali_launch.trainer.data import formats, spectrograms
from dali_launch.trainer.errors import UsageError


def validate(run: RunConfig) -> None:
    data = run.data
    said = spectrograms.problem(data)
    if said:
        raise UsageError(said)
    found = formats.get(data.pipeline)
    if found is None or not found.spectrogram:
        return
    if is_vit(run.model.model):
        said = spectrograms.vit_problem(data, run.model.model)
        if said:
            raise UsageError(said)
