"""`dali-launch data synth --format video`: short VP9 clips whose class is the order in which colours appear.

Every clip shows the same four colours, each for HOLD frames, round and round (CYCLE frames a turn, from a
random place in the turn); a class is one of the six cyclic orders of the four. So one frame alone says nothing
of the class, nor does the mean of the frames, nor the bag of a clip's frames (any CYCLE consecutive frames hold
every colour HOLD times): only which colour follows which does. A model that averages per-frame features stays at
chance (1/classes); one that sees time learns it. Noise and a brightness of its own for every clip keep the
colours from being read off exactly. A clip is a pure function of (seed, split, index); written by PyAV (FFmpeg
in its wheel) as VP9 in WebM, which DALI decodes on the CPU and on GPUs: SPLIT/<class>/<index>.webm.
"""

from __future__ import annotations

import itertools

import numpy as np

from dali_launch.launcher.data.synth_images import SPLIT_IDS

COLOURS = np.array([[220, 40, 40], [40, 200, 60], [50, 70, 230], [230, 210, 40]], np.float32)
HOLD = 2  # frames each colour is shown for
CYCLE = HOLD * len(COLOURS)  # frames of one turn: a clip of 8 frames sees each colour twice
FRAMES = 12  # frames of a clip
SIDE = 64  # frame side at --image-scale 1
RATE = 8  # frames per second, as the container says
# The six orders of the four colours up to rotation: colour 0 first, then a permutation of the other three.
ORDERS = [(0, *rest) for rest in itertools.permutations((1, 2, 3))]
MAX_CLASSES = len(ORDERS)
# libvpx's fastest mode that does not look at the clock: "realtime" (twice as fast) adapts its effort to the time
# it takes, so the same frames encoded under another load could give other bytes; one thread, for the same reason
FAST = {"crf": "20", "b:v": "0", "deadline": "good", "cpu-used": "8", "threads": "1"}


def frames(seed: int, split: str, index: int, label: int, scale: float = 1.0) -> np.ndarray:
    """(FRAMES, side, side, 3) uint8: clip `index` of class `label`."""
    rng = np.random.default_rng([seed, SPLIT_IDS[split], index])
    side = max(16, round(SIDE * scale))
    phase, light = int(rng.integers(CYCLE)), rng.uniform(0.7, 1.1)
    colours = COLOURS[colour_indices(label, phase)] * light
    clip = colours[:, None, None, :] + rng.normal(0, 12, (FRAMES, side, side, 3))
    return np.clip(clip, 0, 255).astype(np.uint8)


def colour_indices(label: int, phase: int) -> list[int]:
    """Which of COLOURS each frame of a clip of class `label` shows, from place `phase` of the turn."""
    order = ORDERS[label]
    return [order[((phase + t) // HOLD) % len(order)] for t in range(FRAMES)]


def encode(clip: np.ndarray, path, codec: str = "libvpx-vp9", options: dict | None = None) -> int:
    """`clip` (frames, H, W, 3 uint8) written to `path` by PyAV; the bytes written."""
    import av

    # bitexact: the muxer writes no random segment and track UIDs, so the same frames give the same bytes
    with av.open(str(path), "w", container_options={"fflags": "+bitexact"}) as container:
        stream = container.add_stream(codec, rate=RATE)
        stream.height, stream.width = clip.shape[1:3]
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        stream.options = FAST if options is None else options
        for frame in clip:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return path.stat().st_size


def class_folder(label: int, classes: int) -> str:
    """Zero-padded, as synth.class_folder: the sorted order DALI numbers class folders in is the class id."""
    return f"{label:0{len(str(classes - 1))}d}"


def write_video(unit) -> int:
    """One unit's clips into class folders (synth.Unit; every class folder made, as write_folders does)."""
    spec, total = unit.spec, 0
    for label in range(spec.classes):
        (unit.folder / class_folder(label, spec.classes)).mkdir(exist_ok=True)
    for index in range(unit.start, unit.stop):
        label = index % spec.classes
        clip = frames(spec.seed, unit.split, index, label, spec.image_scale)
        total += encode(clip, unit.folder / class_folder(label, spec.classes) / f"{index:08d}.webm")
    return total
