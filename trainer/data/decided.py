"""What the pipelines are built from: the run's [data] settings, and the data plan's typed decisions on them
(trainer/plan/data.py decides them, the pipelines' builds read them: dali.py, remainder.py, expected.py, the
evaluation), with the pipeline function resolved once (entries.py). Nothing decided is written back into the
settings: a decided value is read from here, never parsed again from its flag's text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data.hosting import Remainder

OFF, HOST, DECODER = "off", "host", "decoder"  # --decoded-cache's kinds


@dataclass(frozen=True)
class DataPlan:
    settings: DataConfig  # the run's [data] table, as given: its auto values are decided below
    decoder: str  # cpu or mixed
    reader_threads: int
    readers_per_device: int
    output_dtype: str  # float32 or float16
    sample_order: str = "shards"
    feed_workers: int = 0
    decoded_cache: str = OFF  # off, host (this process's decoded shards in host memory) or decoder (DALI's)
    decoded_cache_mb: int = 0  # host: the estimated decoded shards; decoder: its size per device
    decoded_cache_note: str = ""  # why, for the start-up line
    remainder: Remainder | None = None
    # the pipeline function (entries.py resolves the run's once); None: the built-in its settings name, loaded
    function: Callable | None = field(default=None, compare=False, repr=False)

    @property
    def pipeline(self) -> str:
        """--pipeline, as messages name it."""
        return self.settings.pipeline

    @property
    def cache_mb(self) -> int:
        """The decoded cache's MiB (0: none kept)."""
        return self.decoded_cache_mb if self.decoded_cache != OFF else 0

    def record(self) -> dict:
        """What rank_map.json records of it: the decisions (the settings are config.json's, the function code)."""
        return {k: v for k, v in asdict(self).items() if k not in ("settings", "function")}

    def phrase(self) -> str:
        """How this task's DALI pipelines run, for its start-up line."""
        from dali_launch.trainer.data import augment

        data = self.settings
        hardware = f" ({data.hw_decoder_load:.0%} on the hardware decoder)" if self.decoder == "mixed" else ""
        feed = ""
        if self.sample_order == "global":
            where = f"{self.feed_workers} worker processes per pipeline" if self.feed_workers else "this process"
            feed = f", records read in {where}"
        return (
            f"DALI decodes on {'the GPU' if self.decoder == 'mixed' else 'the CPU'}{hardware}, "
            f"{self.reader_threads} threads per pipeline, prefetch {data.prefetch}, {self.output_dtype} out{feed}"
            f"{augment.phrase(data)}, decoded cache {self.decoded_cache_note}"
        )
