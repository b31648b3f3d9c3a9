"""--decoded-cache: each training sample decoded once, then kept decoded (before augmentation).

What `args.decode(encoded, **kwargs)` becomes in a training pipeline (plan/data.py decides the kind):
  decoder  GPU pipelines (nvJPEG): DALI's own decoder cache (`fn.decoders.image`'s cache_size, type
           threshold 0: every image until full), in GPU memory, keyed by each sample's source (its
           reader's source_info); it needs readers that stick to their shard, as ours do. Only
           `decoders.image` has it: the built-in pipelines then decode whole images and crop after
           (`fn.random_resized_crop`), as MLPerf's ResNet-50 does, instead of decoding the crop alone.
  host     CPU pipelines: a table of this process's decoded samples in host memory, keyed the same way.
           `fill` decodes the process's shards once at start-up, through the same `args.decode`
           call of the same pipeline function and the same reader arguments (shuffled too:
           readers.file shuffles its whole file list before it shards it, so unshuffled shards hold
           other files); the training pipelines then look every sample up (`fn.python_function` on its source_info) where they would decode it.
Either way the readers are the same operators with the same arguments and seeds: the same samples
in the same order, every epoch exactly once, their positions in DALI's checkpoints as before. The
graph is another one (DALI's checkpoints name their operators), so a resumed run keeps the cache
kind its checkpoint was written with (start_point.py). Evaluation pipelines decode as before: their
decoded batches are kept on the devices already (--eval-cache-mb).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from nvidia.dali import fn, pipeline_def

from dali_launch.trainer.data import dali_outputs
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.data.shards import shard_size
from dali_launch.trainer.errors import UsageError

FILL_BATCH = 256  # samples per batch of the fill pipelines: big batches keep DALI's threads busy


class HostCache:
    """This process's decoded training samples, by their reader's source_info."""

    def __init__(self):
        self.table: dict[bytes, np.ndarray] = {}

    def add(self, infos, images) -> None:
        for info, image in zip(infos, images):
            self.table[np.asarray(info).tobytes()] = np.array(image)  # a copy: DALI reuses its buffers

    def lookup(self, infos: list[np.ndarray]) -> list[np.ndarray]:
        """A batch's decoded samples (fn.python_function, batch_processing=True). DALI's CPU python_function
        takes a list of samples only, each converted on its own under the GIL the training loop needs: on an
        H200 this made MNIST's epochs slower than decoding every epoch (docs/performance.md, the decoded-sample
        cache), so plan/data.py's AUTO_KINDS keeps no host cache under auto."""
        return [self.table[info.tobytes()] for info in infos]

    @property
    def nbytes(self) -> int:
        return sum(image.nbytes for image in self.table.values())


@dataclass
class Decoder:
    """DALI's decoder cache, `mb` MiB per pipeline (GPU pipelines)."""

    mb: int

    def decode(self, args: PipelineArgs, encoded, kwargs: dict):
        cache = {"cache_size": self.mb, "cache_type": "threshold", "cache_threshold": 0}
        return fn.decoders.image(encoded, **args.decoder_args(), **cache, **kwargs)


@dataclass
class Lookup:
    """The host table, where the pipeline would decode."""

    cache: HostCache

    def decode(self, args: PipelineArgs, encoded, kwargs: dict):
        info = fn.get_property(encoded, key="source_info")
        return fn.python_function(info, function=self.cache.lookup, batch_processing=True, output_layouts="HWC")


@dataclass
class Fill:
    """The pipeline that fills the table: its reader as the training's (the same shard), its decoder's output kept."""

    cache: HostCache
    nodes: list = field(default_factory=list)

    def decode(self, args: PipelineArgs, encoded, kwargs: dict):
        if self.nodes:
            raise UsageError(
                f"--decoded-cache keeps one decoded image per sample; {args.path}'s pipeline decodes twice"
            )
        images = fn.decoders.image(encoded, **args.decoder_args(), **kwargs)
        self.nodes += [fn.get_property(encoded, key="source_info"), images]
        return images


@pipeline_def(enable_conditionals=False)
def _fill_graph(function, args: PipelineArgs):
    function(args)  # its outputs are not the fill's: DALI leaves out what they alone need
    if not args.decoded_cache.nodes:
        raise UsageError(
            "--decoded-cache keeps what args.decode(...) decodes, but the pipeline decodes without it; "
            "decode through args.decode, or use --decoded-cache off"
        )
    return tuple(args.decoded_cache.nodes)


def fill(function, base: PipelineArgs, devices: list[int], global_devices: int, threads: int) -> HostCache:
    """The decoded samples of the shards of `devices` (this process's, of `global_devices`; or the old
    layout's it hosts: remainder.py), one pipeline per device reading it once. `base`: the training
    pipelines' arguments, whose shard is replaced by the device's (the union of its readers' shards:
    shard d of the devices holds shards d*R .. d*R+R-1 of the readers)."""
    cache = HostCache()
    for device in devices:
        role = Fill(cache)
        args = dataclasses.replace(
            base, shard_id=device, num_shards=global_devices, batch_size=FILL_BATCH, decoded_cache=role
        )
        pipe = _fill_graph(function, args, batch_size=FILL_BATCH, num_threads=threads, device_id=None, seed=base.seed)
        pipe.build()
        samples = next(iter(pipe.reader_meta().values()))["epoch_size"]
        for _ in range(math.ceil(shard_size(samples, device, global_devices) / FILL_BATCH)):
            # padding repeats the shard's last sample: the same key again; a host table holds host copies
            cache.add(*(dali_outputs.host(output) for output in pipe.run()))
        del pipe  # its threads and buffers
    return cache


def role(config_mb: int, decoder: str, cache: HostCache | None):
    """The role of the training pipelines' `args.decode` for a resolved --decoded-cache of `config_mb`."""
    if not config_mb:
        return None
    return Lookup(cache) if decoder == "cpu" else Decoder(config_mb)
