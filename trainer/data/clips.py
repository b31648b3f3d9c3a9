"""What a video clip in a data set is, read from its container by PyAV (FFmpeg's demuxer, inside its wheel):
its codec, its frame size and its number of frames; checked before DALI decodes it.

DALI's video reader fails the whole pipeline on a clip it cannot open, and on the CPU it refuses the codecs it
has no CPU decoder for ("Codec 27 (h264) is not supported by the CPU variant of this operator", DALI 2.4):
`problem` names such a clip in one line first. Its frames are counted from the container's packets (one a
frame for the video codecs here: demuxed, not decoded) and its first frame is decoded, so a clip whose stream
is damaged is found too. A 16-frame 32×32 VP9 clip is probed in ~1 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

EXTENSIONS = (".webm", ".mkv", ".avi", ".mp4", ".mov")  # containers FFmpeg reads that hold the codecs below
CPU_CODECS = ("vp8", "vp9", "mjpeg")  # DALI's CPU decoder takes these; NVDEC also h264, hevc, av1, mpeg4
GPU_CODECS = (*CPU_CODECS, "h264", "hevc", "av1", "mpeg4")


@dataclass(frozen=True)
class Probe:
    frames: int
    height: int
    width: int
    codec: str


def probe(path: str) -> Probe:
    """The clip at `path` as its container says, its first frame decoded; ValueError saying what is wrong."""
    import av  # FFmpeg: imported where a clip is read

    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise ValueError("holds no video stream")
            stream = container.streams.video[0]
            codec = stream.codec_context.name
            frames = sum(1 for packet in container.demux(stream) if packet.size)
            container.seek(0)
            first = next(container.decode(stream), None)
    except (av.error.FFmpegError, OSError, StopIteration) as e:
        raise ValueError(f"is no clip FFmpeg can read ({getattr(e, 'strerror', None) or e})") from None
    if first is None or not frames:
        raise ValueError("holds no frame that decodes")
    return Probe(frames, first.height, first.width, codec)


def problem(path: str) -> str | None:
    """What is wrong with the clip at `path` for DALI's video reader on any device, or None."""
    try:
        found = probe(path)
    except ValueError as e:
        return str(e)
    if found.codec not in GPU_CODECS:
        return f"is {found.codec}, which DALI's video reader does not decode; re-encode it as VP9 or H.264"
    return None


def strided(frames: int, stride: int) -> int:
    """Frames a reader with `stride` can take from a clip of `frames` (the first, then every stride-th)."""
    return (frames - 1) // stride + 1 if frames > 0 else 0


def span(count: int, stride: int) -> int:
    """Frames of a clip that `count` frames `stride` apart cover."""
    return (count - 1) * stride + 1
