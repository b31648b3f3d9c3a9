"""The data: where it is, the pipeline that reads it, how DALI runs it, what it does with bad samples.

The [data] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.data import formats
from dali_launch.trainer.data.contract import HW_DECODER_LOAD, RANDAUGMENT
from dali_launch.trainer.settings.fields import opt

RANDAUGMENT_DEFAULT = ",".join(map(str, RANDAUGMENT))  # --randaugment unset, as the pipelines take it
PIPELINES = [f.name for f in (*formats.FORMATS, *formats.READINGS)]  # the built-in --pipeline names, for its help


@dataclass(frozen=True)
class DataConfig:
    data_dir: str | None = opt(
        None,
        "Folder with training/ and testing/ in the pipeline's format. Default: MNIST.",
        details=(
            "Folder holding training/ and testing/ in the pipeline's format: Caffe2 LMDBs for mnist (the layout "
            "of DALI_extra's db/MNIST), JPEG class folders for folders, shards with DALI indexes for tfrecord and "
            "webdataset, tar shards of images with masks for segmentation, class folders of sounds for audio (`dali-launch "
            "data synth` writes each). "
            "Default (mnist and own pipelines): $DALI_EXTRA_PATH/db/MNIST if set, else the embedded MNIST sample."
        ),
        path=True,
    )
    pipeline: str = opt(
        "mnist",
        f"{', '.join(PIPELINES)}, or package.module:function.",
        details=(
            "Input pipeline: mnist (the example's, Caffe2 LMDB), folders (JPEG class folders: random resized "
            "crop, flip, normalize), tfrecord (tf.Example shards) and webdataset (tar shards), both with the folders "
            "augmentation, segmentation (tar shards of images with masks: one random window and flip for both), "
            "detection (COCO images and boxes, for --task detection), views (two SimCLR views of each folders image, "
            "for --task contrastive), video (class folders of clips, for --task video), audio (class folders of "
            "sounds as log-mel spectrograms, for --task audio), or package.module:function of your own (docs/data.md)."
        ),
    )
    num_classes: int = opt(
        10,
        "Classes in the data set: the model's output width.",
        details="Classes in the data set: the model's output width and the one-hot depth.",
    )
    pipeline_params: str = opt(
        "",
        "NAME=ROLE,...: a DALI pipeline function's parameters the rule cannot fill.",
        details=(
            "DALI's own pipeline functions (@pipeline_def, data_iterator, or taking shard_id and num_shards): "
            "NAME=ROLE,... fills parameters the rule cannot guess from their names; ROLE is path, training, shard_id, "
            "num_shards, num_classes, image_size or seed, anything else a literal value (docs/data.md)."
        ),
    )
    image_size: int = opt(
        224,
        "Side in pixels of the built-in image pipelines' square crops.",
        details="Side in pixels of the square crops the folders, tfrecord, webdataset and segmentation pipelines feed the model.",
    )
    reader_threads: int = opt(
        0,
        "DALI CPU threads per reader (0: auto).",
        details=(
            "DALI CPU threads per pipeline (per reader). 0: auto (pipelines that decode on the CPU: 2, and more "
            "readers instead; on the GPU (nvJPEG): the cores this process has per device, at most 8)."
        ),
        on_resume="may change",
    )
    readers_per_device: int = opt(
        0,
        "DALI pipelines per device, each reading part of its shard (0: auto).",
        details=(
            "DALI pipelines per device, each reading its own part of the device's shard (one Caffe2 reader is a "
            "serial bottleneck). 0: auto (CPU devices: 1; GPUs: the most of 8, 4, 2, 1 that divides the device's "
            "batch and whose --reader-threads fit the cores this process has per device)."
        ),
        on_resume="elastic",
    )
    prefetch: int = opt(
        4,
        "Batches each DALI pipeline prepares ahead of the step.",
        details=(
            "Batches each DALI pipeline prepares ahead of the trainer (prefetch_queue_depth): "
            "a deeper queue rides out uneven batch times."
        ),
        on_resume="may change",
    )
    sample_order: str = opt(
        "shards",
        "shards (each reader shuffles its shard) or global (one permutation per epoch).",
        details=(
            "Order of training samples: shards (each device's DALI reader shuffles its own shard; the fastest) or "
            "global (one permutation per epoch from --seed alone, read through an external source). Either resumes "
            "on another topology mid-epoch, each sample once per epoch; global keeps the same steps on any device "
            "count, shards the same within the interrupted epoch (docs/resilience.md, Elastic resume)."
        ),
        choices=("shards", "global"),
    )
    feed_workers: int = opt(
        -1,
        "--sample-order global: worker processes reading records (-1: auto).",
        details=(
            "--sample-order global: DALI worker processes per pipeline that read its records (a parallel external "
            "source), off the training process's GIL. 0: read in the training process; -1: auto (the cores per "
            "device that --reader-threads leave, at most 4; 0 where none are left)."
        ),
        on_resume="may change",
    )
    decoder: str = opt(
        "auto",
        "Where JPEGs are decoded: cpu, mixed (nvJPEG on the GPU), or auto.",
        details=(
            "Where JPEGs are decoded, and so where DALI runs: cpu (the whole pipeline on the "
            "CPU; JAX copies batches to the devices), mixed (nvJPEG; the pipeline on the GPU), or auto: "
            "cpu on CPU devices; on GPUs each pipeline picks (mnist: cpu, faster for 28x28 images; "
            "folders and your own: mixed)."
        ),
        choices=("auto", "cpu", "mixed"),
    )
    hw_decoder_load: float = opt(
        HW_DECODER_LOAD,
        "--decoder mixed: the share of JPEGs for the hardware decoder.",
        details=(
            "--decoder mixed: the share of each batch's JPEGs given to the GPU's hardware JPEG decoder (A100/H100/"
            "H200), the rest to nvJPEG's CUDA decoder (the default is the share that trained ResNet-50 "
            "fastest: docs/performance.md; DALI's own default is 0.65)."
        ),
    )
    bad_samples: str = opt(
        "stop",
        "An image DALI cannot decode: stop, or skip it (listed in bad_samples.jsonl).",
        details=(
            "An image DALI cannot decode (not an image, truncated: found from headers before training, once per data "
            "set): stop (one line naming it) or skip (left out of the reader, listed in RUN/bad_samples.jsonl; every "
            "other sample still once an epoch). Folders, TFRecord, WebDataset, and pipelines of your own that read "
            "through args.read; skip is refused for a Caffe2 LMDB (--pipeline mnist), which has no index to leave one out of."
        ),
        choices=("stop", "skip"),
    )
    max_bad_samples: str = opt(
        "0.001",
        "--bad-samples skip: stop past this many (a count, or a fraction below 1).",
        details=(
            "--bad-samples skip: stop anyway past this many bad samples in a split: a count, or a fraction of it below 1 "
            "(at least one sample; 0: none)."
        ),
    )
    output_dtype: str = opt(
        "auto",
        "What image pipelines hand the model: float32, float16, or auto.",
        details=(
            "What the built-in image pipelines hand the model: float32, float16 (half the bytes; DALI has no "
            "bfloat16), or auto: float16 with --precision bf16, which computes in bf16 anyway, else float32."
        ),
        choices=("auto", "float32", "float16"),
    )
    # Today's vision recipes: augmentation on the DALI side (data/augment.py).
    augment: str = opt(
        "none",
        "Training augmentation in DALI: none, randaugment, trivialaugment, autoaugment.",
        details=(
            "Training augmentation after the crop and flip, in DALI (on the GPU with --decoder mixed), from "
            "nvidia.dali.auto_aug: randaugment (--randaugment N,M), trivialaugment (TrivialAugment Wide), "
            "autoaugment (AutoAugment's ImageNet policy), or none. Image pipelines only; evaluation is never augmented."
        ),
        choices=("none", "randaugment", "trivialaugment", "autoaugment"),
    )
    randaugment: str = opt(
        "",
        "--augment randaugment: N,M (N operations at magnitude M). Unset: 2,9.",
        details=(
            "--augment randaugment: N,M: N operations per image at magnitude M (0..30), as timm's rand-m9-n2; "
            "unset: 2,9. Refused with any other --augment."
        ),
    )

    def randaugment_nm(self) -> tuple[int, int]:
        """--randaugment as (N, M), 2,9 when unset; ValueError when it is not two integers."""
        n, m = (int(part) for part in (self.randaugment or RANDAUGMENT_DEFAULT).replace(" ", "").split(","))
        return n, m

    clip_frames: int = opt(
        8,
        "--pipeline video: frames of each clip the model sees.",
        details=(
            "--pipeline video: the frames T of each clip the model sees, --clip-stride apart; every clip of the data "
            "set needs at least (T - 1) × stride + 1 frames (checked before any job)."
        ),
    )
    clip_stride: int = opt(1, "--pipeline video: a clip's frames are this many frames apart.")
    clip_window: int = opt(
        0,
        "--pipeline video: frames (--clip-stride apart) a training sample decodes; 0: 4 × --clip-frames.",
        details=(
            "--pipeline video: training reads each clip as windows of this many frames (--clip-stride apart; 0: 4 × "
            "--clip-frames; at most the shortest clip's), each window a sample once an epoch, a random run of "
            "--clip-frames in each: a long clip is several samples, every part of it seen. Evaluation reads each "
            "test video whole."
        ),
    )
    eval_clips: int = opt(
        2,
        "--pipeline video: evenly spaced clips of each test video, their logits averaged.",
        details=(
            "--pipeline video: the evenly spaced clips evaluation takes of each test video; --task video scores "
            "each clip and each video (its clips' logits averaged)."
        ),
    )
    decoded_cache: str = opt(
        "auto",
        "Keep decoded training samples: auto, off, or a size (4096, 512M, 12G).",
        details=(
            "Decode each training sample once and keep it decoded (before augmentation): with nvJPEG in DALI's decoder "
            "cache on the GPU (SIZE: MiB per device; cached until full), on the CPU in host memory (SIZE: MiB this "
            "process may fill; on only when the decoded shards fit). auto: on where the decoded split fits in what "
            "that memory leaves (GPU: outside XLA's pool; host: a quarter of what is available), else off; off; or "
            "SIZE (4096, 512M, 12G). The same samples in the same order; needs a pipeline that decodes through "
            "args.decode (the built-in ones do); not under --sample-order global. The start-up line says what it chose."
        ),
    )

    def decoded_cache_mb(self) -> int | None:
        """--decoded-cache as MiB: None for auto, 0 for off; ValueError for anything else than SIZE."""
        value = self.decoded_cache.strip().upper()
        if value in ("AUTO", "OFF"):
            return None if value == "AUTO" else 0
        scale = {"M": 1, "G": 1024}.get(value[-1:], None)
        mb = int(value[:-1] if scale else value) * (scale or 1)
        if mb <= 0:
            raise ValueError(self.decoded_cache)
        return mb

    # --pipeline audio (data/audio.py): what its sounds become (data/spectrograms.py)
    sample_rate: int = opt(
        16000,
        "--pipeline audio: the sample rate (Hz) every sound is resampled to.",
        details="--pipeline audio: the sample rate (Hz) every sound is resampled to as it is decoded, whatever its own.",
    )
    clip_seconds: float = opt(
        1.0,
        "--pipeline audio: the clip each sound is cropped or padded to (seconds).",
        details=(
            "--pipeline audio: the length each sound is cropped or padded to (silence), in seconds: a random window in "
            "training, the centre in evaluation. Its spectrogram has --clip-seconds × 100 frames (10 ms hops)."
        ),
    )
    mel_bins: int = opt(
        64,
        "--pipeline audio: the log-mel spectrogram's frequency bins.",
        details="--pipeline audio: the mel filter bank's bins: the height of the log-mel spectrogram the model sees.",
    )
    audio_channels: int = opt(
        0,
        "--pipeline audio: 0 downmixes to mono; N keeps N channels.",
        details=(
            "--pipeline audio: 0 downmixes every sound to mono; N keeps N channels, a spectrogram each (the model's N "
            "input channels): a sound with another count is refused before the job starts."
        ),
    )
