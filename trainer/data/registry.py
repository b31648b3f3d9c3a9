"""`--pipeline`: the built-in pipelines by name (the formats' own and their further readings, formats.py), and a
pipeline function of the user's own, loaded as the contract's `function(args)` (entry_points.py: what the three
loaders share; a function written as DALI writes one, adapted: native.py). Nothing heavy at import: a built-in
pipeline's module imports DALI when it is loaded.
"""

from __future__ import annotations

from dali_launch.trainer import entry_points
from dali_launch.trainer.data import formats, native
from dali_launch.trainer.data.contract import Pipeline
from dali_launch.trainer.entry_points import Kind, Sent


def pipelines() -> dict[str, str]:
    """Every built-in --pipeline name and the "module:attribute" of its function."""
    return {found.name: found.pipeline for found in (*formats.FORMATS, *formats.READINGS)}


PIPELINE = Kind(
    "pipeline",
    "function",
    "docs/data.md",
    pipelines,
    lambda signature: ("function(args)", (None,), {}),
    adapt=native.adapted,
    own=lambda value: isinstance(value, Pipeline),  # a contract.Pipeline made of another module's function
)


def load(name, sent: Sent | None = None):
    """The function `--pipeline name` stands for, as the contract's function(args) (entry_points.load)."""
    return entry_points.load(PIPELINE, name, sent)


def check(name: str, sent: Sent | None = None) -> None:
    """What the launcher calls before writing anything: a built-in name costs nothing; another is imported and
    its call checked."""
    if name not in pipelines():
        load(name, sent)
