"""The pipeline contract, for `--pipeline package.module:function` (built-ins: pipelines.py).

It imports neither JAX nor DALI, so a user's pipeline module can import it at no cost:

    from dali_launch.trainer.data.contract import Pipeline, PipelineArgs

    def my_pipeline(args: PipelineArgs):
        jpegs, labels = args.read("file", file_root=args.path)  # or fn.readers.file(..., **args.reader_args())
        ...
        return images, labels

    tiny_pipeline = Pipeline(my_pipeline, auto_decoder="cpu")  # small images: --decoder auto decodes on the CPU

`function(args: PipelineArgs) -> (images, labels)` is called inside our `pipeline_def`, once per
reader (--readers-per-device per device) and split, and returns one DALI DataNode for each output of the run's
task, in its order (tasks/contract.py; classification's, the default: images, labels). It has:
- exactly one reader reading `args.path` (DATA_DIR/training or DATA_DIR/testing): `args.read(name, **kwargs)`
  for the formats records/ knows (caffe2, file, tfrecord, webdataset), giving (encoded, labels): each sample's
  file bytes (uint8) and its class id (int32, (1,); a WebDataset's second member that is no class: its bytes);
  it also works under --sample-order global and screens the split for images DALI cannot decode first
  (--bad-samples), or any `fn.readers.*` given `**args.reader_args()` (shard, padding, shuffling: the masks rely on it);
- `images`: one shape and dtype for every sample, in training and in evaluation (the model is
  initialised on it); CPU or GPU outputs (`args.on_gpu`: GPU ones reach JAX without a host copy);
  decoders are given `**args.decoder_args()` (device and, on the GPU, the hardware decoder's share and
  nvJPEG's memory hints), or `args.decode(encoded, **kwargs)` decodes: then --decoded-cache may keep each
  training sample decoded (`args.keeps_decoded`: crop after decoding, not in the decoder); image
  pipelines output `args.dtype()` (float16 under --precision bf16);
- `images` of training: `args.auto_augment(images)` on the uint8 HWC crops, before normalising, applies
  --augment (a no-op without it, and in evaluation);
- `labels`: integer class ids (shape () or (1,)) in 0..num_classes-1 (checked while training:
  label_check.py), or float one-hot/soft targets (num_classes,).
Evaluation (`training=False`) must be deterministic: its decoded batches may be kept and reused
(--eval-cache-mb). A function may be wrapped in a `Pipeline` to say where `--decoder auto` decodes, and
that it decodes through `args.decode` (`cacheable=True`: --decoded-cache auto may then keep its samples).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

OUTPUTS = ("images", "labels")  # what a pipeline function returns, in order: the batches' names

# Defaults of knobs a pipeline is given, named once here: this module imports nothing, so the flags' own
# definitions (config.py) can take them from it too.
HW_DECODER_LOAD = 0.35  # --hw-decoder-load: trained ResNet-50 fastest on an H200 (DALI's own default: 0.65)
RANDAUGMENT = (2, 9)  # --randaugment N,M unset: timm's rand-m9-n2
AUDIO_SETTINGS = ("sample_rate", "clip_seconds", "mel_bins", "audio_channels")  # the [data] fields PipelineArgs takes

# nvJPEG's buffers sized as in DALI's ResNet-50 examples for the largest ImageNet image (5980x6430): with
# DALI's defaults (16 and 8 MiB, no hardware-decoder preallocation) they are regrown during the first epoch.
NVJPEG_PADDING = {
    "device_memory_padding": 211_025_920,
    "host_memory_padding": 140_544_512,
    "preallocate_width_hint": 5980,
    "preallocate_height_hint": 6430,
}


@dataclass(frozen=True)
class PipelineArgs:
    """What a pipeline function receives: one device's view of one split."""

    path: str  # the split's folder: DATA_DIR/training or DATA_DIR/testing
    shard_id: int  # this device's shard of the split, of num_shards
    num_shards: int
    batch_size: int  # samples per DALI batch of this reader: the device's per call / --readers-per-device
    training: bool  # shuffle and augment; False: evaluation, every sample once
    on_gpu: bool  # the pipeline runs on the device's GPU (decoder mixed); outputs may stay on it
    decoder: str  # --decoder resolved (placement.decoder): cpu or mixed
    seed: int  # the pipeline's seed, already used by DALI's random operators and shuffling
    num_classes: int  # --num-classes
    image_size: int  # --image-size: the side of square crops, for pipelines that crop
    hw_decoder_load: float = HW_DECODER_LOAD  # --hw-decoder-load: the hardware JPEG decoder's share (mixed)
    output_dtype: str = "float32"  # --output-dtype resolved: float32 or float16
    feed: object = None  # --sample-order global: the reader's feed.Feed (training only); None: DALI's shards
    decoded_cache: object = None  # decoded_cache.py's role for args.decode (training only); None: decode each time
    bad_samples: str = "stop"  # --bad-samples: what `read` does with the split's bad samples (bad_samples.py)
    max_bad_samples: str = "0.001"  # --max-bad-samples
    augment: str = "none"  # --augment: none, randaugment, trivialaugment or autoaugment (see auto_augment)
    randaugment: tuple[int, int] = RANDAUGMENT  # --randaugment N,M
    pipeline_params: str = ""  # --pipeline-params: what a DALI-style function's parameters get (data/native.py)
    clip_frames: int = 8  # --clip-frames: frames of a video clip (--pipeline video)
    clip_stride: int = 1  # --clip-stride
    clip_window: int = 0  # --clip-window: frames of a training window (0: 4 × clip_frames)
    eval_clips: int = 2  # --eval-clips: evenly spaced clips of each test video
    sample_rate: int = 16000  # --sample-rate, --clip-seconds, --mel-bins, --audio-channels: for pipelines of sounds
    clip_seconds: float = 1.0  # (data/audio.py; data/spectrograms.py makes them a spectrogram's geometry)
    mel_bins: int = 64
    audio_channels: int = 0  # 0: downmix to mono
    applied: list = field(default_factory=list, init=False, compare=False, repr=False)  # auto_augment was called
    left_out: list = field(default_factory=list, init=False, compare=False, repr=False)  # `read`'s skipped scans

    def reader_args(self) -> dict:
        """Keyword arguments for the pipeline's one reader: this device's shard, padded to whole batches."""
        return {
            "shard_id": self.shard_id,
            "num_shards": self.num_shards,
            "random_shuffle": self.training,
            "pad_last_batch": True,
            "stick_to_shard": True,
        }

    def auto_augment(self, images):
        """--augment's policy (RandAugment, TrivialAugment Wide, AutoAugment: data/augment.py) on a batch of
        uint8 HWC training crops of --image-size; `images` as they are in evaluation or with --augment none.
        A pipeline of one's own calls it after its crop (the built-ins do); --augment is refused if not."""
        from dali_launch.trainer.data import augment

        return augment.apply(images, self)

    def read(self, reader: str, **kwargs):
        """(encoded, labels) of the pipeline's one reader, `fn.readers.<reader>(**kwargs)`, in the run's sample
        order: this device's shard (DALI's reader) or its rows of the global order (an external source)."""
        from dali_launch.trainer.data import feed  # DALI: imported only inside a pipeline

        return feed.read(self, reader, kwargs)

    def decoder_args(self) -> dict:
        """Keyword arguments for fn.decoders.*: the device, and for nvJPEG the hardware decoder's share and
        memory paddings large enough for ImageNet-class images, so its buffers are not regrown mid-epoch."""
        if self.decoder != "mixed":
            return {"device": self.decoder}
        return {"device": "mixed", "hw_decoder_load": self.hw_decoder_load, **NVJPEG_PADDING}

    def decode(self, encoded, **kwargs):
        """`fn.decoders.image(encoded, **self.decoder_args(), **kwargs)`, or where --decoded-cache keeps decoded
        samples, each one decoded once: by DALI's decoder cache on the GPU, looked up in host memory on the CPU."""
        if self.decoded_cache is not None:  # decoded_cache.py's role for this pipeline
            return self.decoded_cache.decode(self, encoded, kwargs)
        from nvidia.dali import fn  # imported here: this module stays free of DALI

        return fn.decoders.image(encoded, **self.decoder_args(), **kwargs)

    @property
    def keeps_decoded(self) -> bool:
        """`decode` gives cached whole images: crop them afterwards (fn.random_resized_crop), not while decoding."""
        return self.decoded_cache is not None

    def dtype(self):
        """The DALI type image pipelines output (imported here: this module stays free of DALI)."""
        from nvidia.dali import types

        return types.FLOAT16 if self.output_dtype == "float16" else types.FLOAT


@dataclass(frozen=True)
class Pipeline:
    """A pipeline function and what it says about itself: `auto_decoder` is where `--decoder auto`
    decodes on GPUs (cpu for images so small that the CPU decodes them faster; placement.py)."""

    function: Callable
    auto_decoder: str = "mixed"
    cacheable: bool = False  # it decodes through args.decode: --decoded-cache auto may keep its decoded samples
    # ...and decodes whole training images whatever --decoded-cache says (it crops after decoding): DALI's decoder
    # cache then only takes work away (no decoding after the first epoch), so auto keeps one on GPUs where it fits
    whole_images: bool = False

    def __post_init__(self):
        if self.auto_decoder not in ("cpu", "mixed"):
            raise ValueError(f"Pipeline(auto_decoder={self.auto_decoder!r}): use 'cpu' or 'mixed'")

    def __call__(self, args: PipelineArgs):
        return self.function(args)


def auto_decoder(pipeline) -> str:
    """Where `--decoder auto` decodes for this `--pipeline` target on GPUs: a `Pipeline`'s own word, else mixed."""
    return pipeline.auto_decoder if isinstance(pipeline, Pipeline) else "mixed"


def cacheable(pipeline, name: str, decoded_cache: str) -> bool:
    """Whether --decoded-cache may keep the decoded samples of `pipeline` (the --pipeline `name` loaded): a
    `Pipeline`'s word. A size given for one that does not say so is refused (auto just leaves it off)."""
    if isinstance(pipeline, Pipeline) and pipeline.cacheable:
        return True
    if decoded_cache.strip().lower() not in ("auto", "off"):
        from dali_launch.trainer.errors import UsageError

        raise UsageError(
            f"--decoded-cache {decoded_cache} keeps what args.decode(...) decodes, and --pipeline {name} does not "
            f"say it decodes so; wrap it in Pipeline(function, cacheable=True), or use --decoded-cache off"
        )
    return False


def decodes_whole_images(pipeline) -> bool:
    """Whether `pipeline` (a --pipeline target) says it decodes whole training images through args.decode."""
    return isinstance(pipeline, Pipeline) and pipeline.cacheable and pipeline.whole_images


def class_ids(labels, batch_dims: int = 1):
    """Integer class ids from either kind of labels the contract allows (numpy or jax arrays)."""
    return labels.argmax(-1) if labels.dtype.kind == "f" else labels.reshape(labels.shape[:batch_dims])
