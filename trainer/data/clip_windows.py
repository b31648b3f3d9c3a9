"""Training windows of video clips: every clip of a split cut into windows of W frames (--clip-stride apart), each
window one sample of DALI's video reader, so that a training sample decodes W frames however long its clip is and
the random runs of T = --clip-frames frames drawn in the windows start anywhere in the clip.

Why windows: DALI's video reader (2.4) takes no start frame per sample; it reads the sequences it lists itself
(from a clip's first frame, every `step` frames after, or from a `file_list`'s frame ranges) and only those keep
exactly-once epochs and DALI's checkpoints. One sequence from each clip's first frame, as long as the clip, would
decode all of a 250-frame clip for a run of 8; a shorter one never sees the clip's end. So each window is a line
of a file list (`file_list_format="frames"`): window k of a clip of S frames (strided) starts at k × (W - T + 1),
and every start of a run of T frames lies among the first W - T + 1 frames of one window; the last window ends at
the clip's last frame (it may overlap the one before: the starts they share are drawn from either). W is
--clip-window (0: 4 × T), at most the split's shortest clip, so every window is whole.

DALI's file list splits its lines at white space: a clip whose path holds some is listed through a link to it in
the per-user cache. The list itself is written there too, named by its content (in a temporary folder of the
user's where the cache cannot be written).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from dali_launch.trainer.cache import cache_root
from dali_launch.trainer.data import clips
from dali_launch.trainer.run_dir import write_atomic

CLIPS_A_WINDOW = 4  # --clip-window 0: a window of this many clips' frames


def window_of(window: int, clip_frames: int, shortest: int) -> int:
    """The frames (strided) of every window of a split whose shortest clip has `shortest`: --clip-window (0: 4 × T),
    at most that clip's."""
    return min(window or CLIPS_A_WINDOW * clip_frames, shortest)


def starts(frames: int, window: int, clip_frames: int) -> list[int]:
    """The first frame (strided) of each window of a clip of `frames` strided frames: every W - T + 1 frames from
    0, then one ending at the clip's last frame."""
    last, step = frames - window, window - clip_frames + 1
    found = list(range(0, last + 1, step))
    return found if found[-1] == last else [*found, last]


def file_list(files: list[str], labels: list[int], counts: list[int], clip_frames: int, stride: int, window: int):
    """The path of a DALI file list of every window of the clips (`counts`: their frame counts), `NAME LABEL START
    END` lines in frames (END excluded), in the clips' order."""
    lines = []
    for name, label, count in zip(files, labels, counts):
        listed = _listable(name)
        for start in starts(clips.strided(count, stride), window, clip_frames):
            lines.append(f"{listed} {label} {start * stride} {start * stride + clips.span(window, stride)}\n")
    text = "".join(lines)
    path = _folder() / f"windows-{hashlib.sha256(text.encode()).hexdigest()[:32]}.txt"
    if not path.exists():
        write_atomic(path, text)
    return str(path)


def _listable(name: str) -> str:
    """`name` as a file list can hold it: itself, or a link to it named without white space."""
    if not any(c.isspace() for c in name):
        return name
    link = _folder() / (hashlib.sha256(name.encode()).hexdigest()[:32] + Path(name).suffix)
    if not link.is_symlink():
        temporary = link.with_name(f".{link.name}.{os.getpid()}")
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(name)
        os.replace(temporary, link)  # the ranks of a host making the same link each put a whole one in place
    return str(link)


def _folder() -> Path:
    """The per-user cache's folder of clips, or a temporary folder of the user's where that cannot be written."""
    for folder in (cache_root() / "clips", Path(tempfile.gettempdir()) / f"dali-launch-clips-{os.getuid()}"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    return Path(tempfile.mkdtemp(prefix="dali-launch-clips-"))
