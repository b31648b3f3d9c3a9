"""The catalogue of bad inputs, video clips: a clip FFmpeg cannot read, clips shorter than --clip-frames, the
settings a video run cannot take. Each ends with one exact line on stderr and exit code 2, nothing written,
nothing started (see catalogue.py)."""

from __future__ import annotations

import pytest
from catalogue import broken_sample, check_entry, synth_set

VIDEO = ["train", "--task", "video", "--data-dir", "{data}", "--num-classes", "3", "--image-size", "16"]
SHORT = "has 12 frames, fewer than a clip's"
ENTRIES = [
    pytest.param(
        [*VIDEO, "--clip-frames", "16"],
        f"{{data}}/training/0/00000000.webm {SHORT} 16 (--clip-frames 16 × --clip-stride 1); lower --clip-frames or "
        "--clip-stride, or leave such clips out",
        synth_set("video"),
        id="clips-shorter-than-clip-frames",
    ),
    pytest.param(
        [*VIDEO, "--clip-stride", "2"],
        f"{{data}}/training/0/00000000.webm {SHORT} 15 (--clip-frames 8 × --clip-stride 2); lower --clip-frames or "
        "--clip-stride, or leave such clips out",
        synth_set("video"),
        id="clips-shorter-than-clip-frames-strided",
    ),
    pytest.param(
        VIDEO,
        "{data}/training/1/00000001.webm is no clip FFmpeg can read (Invalid data found when processing input); "
        "replace or remove it, or pass --bad-samples skip to train without it",
        broken_sample("video", "text"),
        id="clip-ffmpeg-cannot-read",
    ),
    pytest.param(
        [*VIDEO, "--decoded-cache", "512"],
        "--decoded-cache 512 keeps what args.decode(...) decodes, and --pipeline video decodes its samples itself; "
        "leave --decoded-cache out (auto: off there)",
        synth_set("video"),
        id="video-decoded-cache-size",
    ),
    pytest.param(
        [*VIDEO, "--augment", "randaugment"],
        "--augment randaugment moves and warps each image alone, not a clip's frames alike: --pipeline video takes "
        "none; use --augment none",
        synth_set("video"),
        id="video-augment",
    ),
    pytest.param(
        [*VIDEO, "--mixup", "0.2"],
        "--mixup 0.2: mixing is for images; --task video takes none, leave it out",
        synth_set("video"),
        id="video-mixup",
    ),
    pytest.param(
        [*VIDEO, "--eval-clips", "0"],
        "--clip-frames 8, --clip-stride 1 and --eval-clips 0: each must be at least 1",
        synth_set("video"),
        id="video-eval-clips-zero",
    ),
    pytest.param(
        [*VIDEO, "--clip-window", "4"],
        "--clip-window 4 holds fewer frames than a clip's --clip-frames 8; pass at least 8, or 0 for 4 × --clip-frames",
        synth_set("video"),
        id="video-clip-window-shorter-than-a-clip",
    ),
    pytest.param(
        ["data", "synth", "{tmp}/out", "--format", "video", "--classes", "7"],
        "--classes 7: a video set's classes are the 6 orders of its four colours; use 2 to 6",
        None,
        id="synth-video-too-many-classes",
    ),
]


@pytest.mark.parametrize("args, message, make", ENTRIES)
def test_video(capsys, place, nothing_starts, args, message, make):
    extra = ["--run-root", "{root}"] if args[0] == "train" else []
    check_entry(capsys, place, [*args, *extra], message, make)
