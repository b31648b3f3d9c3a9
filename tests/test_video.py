"""The video format's parts, each on a few tiny clips: what `data synth --format video` draws (its class only in
the order of the frames), clips another tool wrote read as ours are, a bad clip named and left out, a clip too
short refused, the evaluation's evenly spaced clips, the task's two accuracies and the models' shapes."""

from __future__ import annotations

import collections
import itertools
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from nvidia.dali import pipeline_def

from dali_launch.launcher.data import synth_clips
from dali_launch.trainer.data import bad_samples, clip_windows, clips, formats
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.data.records import videos
from dali_launch.trainer.data.video import starts
from dali_launch.trainer.errors import UsageError

ARGS = PipelineArgs("", 0, 1, 4, False, False, "cpu", 0, 6, 16, clip_frames=8, eval_clips=3)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DALI_LAUNCH_CACHE", str(tmp_path / "cache"))


def _split(root: Path, count: int = 4) -> Path:
    """A split of `count` synthetic clips in two class folders, written as data synth writes them."""
    for index in range(count):
        folder = root / str(index % 2)
        folder.mkdir(parents=True, exist_ok=True)
        synth_clips.encode(synth_clips.frames(0, "training", index, index % 2, 0.25), folder / f"{index}.webm")
    return root


def _read(args: PipelineArgs, batch: int) -> tuple[np.ndarray, np.ndarray]:
    from dali_launch.trainer.data.video import video

    pipe = pipeline_def(lambda: tuple(video(args)), batch_size=batch, num_threads=1, device_id=None, seed=1)()
    pipe.build()
    clips_out, labels = pipe.run()
    return np.array(clips_out.as_tensor()), np.array(labels.as_tensor())


def test_a_clips_class_is_only_in_the_order_of_its_frames():
    """Any turn of the colours (CYCLE consecutive frames) holds every colour HOLD times, in every class: no frame
    and no average of frames tells the class; the six classes are six different orders."""
    turns = set()
    for label in range(synth_clips.MAX_CLASSES):
        for phase in range(synth_clips.CYCLE):
            shown = synth_clips.colour_indices(label, phase)
            for start in range(synth_clips.FRAMES - synth_clips.CYCLE + 1):
                window = shown[start : start + synth_clips.CYCLE]
                assert collections.Counter(window) == {c: synth_clips.HOLD for c in range(4)}
        turns.add(tuple(synth_clips.colour_indices(label, 0)[:: synth_clips.HOLD][:4]))
    assert len(turns) == synth_clips.MAX_CLASSES


def test_clips_another_tool_wrote_read_as_ours(tmp_path):
    """A file list naming our VP9 clip and two that FFmpeg's own command line wrote (MJPEG in AVI, VP9 in
    Matroska): each read whole, its frames as written (to the codecs' loss), its label from the list."""
    import imageio_ffmpeg

    split = tmp_path / "split"
    split.mkdir()
    clip = synth_clips.frames(0, "testing", 3, 2, 0.25)
    synth_clips.encode(clip, split / "ours.webm")
    for name, codec, pixels in (("theirs.avi", "mjpeg", "yuvj420p"), ("theirs.mkv", "libvpx-vp9", "yuv420p")):
        writer = imageio_ffmpeg.write_frames(
            str(split / name), (16, 16), fps=8, codec=codec, pix_fmt_out=pixels, quality=None, macro_block_size=1
        )
        writer.send(None)
        for frame in clip:
            writer.send(np.ascontiguousarray(frame))
        writer.close()
    (split / formats.VIDEO_LIST).write_text("ours.webm 2\ntheirs.avi 2\ntheirs.mkv 2\n")
    assert formats.detect(split).name == "video"
    assert [clips.probe(str(split / n)).codec for n in ("theirs.avi", "theirs.mkv")] == ["mjpeg", "vp9"]
    read, labels = _read(replace(ARGS, path=str(split), eval_clips=2, clip_frames=12), 3)
    assert read.shape == (3, 2, 12, 16, 16, 3)
    assert labels.tolist() == [2, 2, 2]
    first = read[:, 0] * np.array([0.229, 0.224, 0.225]) * 255 + np.array([0.485, 0.456, 0.406]) * 255
    assert np.abs(first - clip).mean(axis=(1, 2, 3, 4)).max() < 12  # noise of std 12 through lossy codecs


def test_a_clip_ffmpeg_cannot_read_is_named_then_left_out(tmp_path):
    split = _split(tmp_path / "split")
    bad = split / "1" / "1.webm"
    bad.write_bytes(bad.read_bytes()[:200])
    kwargs = formats.get("video").reader_arguments(split)
    with pytest.raises(
        UsageError, match=rf"^{re.escape(str(bad))} is no clip FFmpeg can read \(.+\); replace or remove"
    ):
        bad_samples.screen("video", kwargs, "stop", "0.5")
    kept, scan = bad_samples.screen("video", kwargs, "skip", "0.5")
    assert [b.sample for b in scan.bad] == [str(bad)] and str(bad) not in kept["filenames"]
    assert len(kept["filenames"]) == len(kept["labels"]) == 3


def test_a_clip_shorter_than_a_clip_is_refused_in_one_line(tmp_path):
    split = _split(tmp_path / "split")
    kwargs = formats.get("video").reader_arguments(split)
    assert videos.frames(kwargs) == [synth_clips.FRAMES] * 4
    assert videos.shortest(kwargs, 8, 1) == 12 and videos.shortest(kwargs, 2, 3) == 4
    short = f"{split}/0/0.webm has 12 frames, fewer than a clip's 15 (--clip-frames 8 × --clip-stride 2)"
    fix = "; lower --clip-frames or --clip-stride, or leave such clips out"
    with pytest.raises(UsageError, match=f"^{re.escape(short + fix)}$"):
        videos.shortest(kwargs, 8, 2)


@pytest.mark.parametrize("frames, window, clip", [(12, 12, 8), (41, 8, 4), (250, 32, 8), (33, 32, 8), (9, 9, 9)])
def test_the_windows_of_a_clip_hold_every_run_of_it(frames, window, clip):
    """Every run of T frames of a clip lies in a window; windows W - T + 1 frames apart, the last at the clip's end."""
    found = clip_windows.starts(frames, window, clip)
    assert found[0] == 0 and found[-1] == frames - window and found == sorted(set(found))
    assert max((b - a for a, b in itertools.pairwise(found)), default=1) <= window - clip + 1
    runs = {start + k for start in found for k in range(window - clip + 1)}
    assert runs == set(range(frames - clip + 1))
    assert clip_windows.window_of(0, clip, frames) == min(4 * clip, frames)
    assert clip_windows.window_of(window, clip, frames) == window


def _numbered(root: Path, lengths: dict[str, int]) -> Path:
    """Clips whose frame t is grey 6·t, class folders named by their lengths: a frame's number read off its pixels."""
    for name, count in lengths.items():
        (root / name).mkdir(parents=True)
        clip = np.repeat(np.arange(count, dtype=np.uint8)[:, None, None, None] * 6, 16 * 16 * 3).reshape(
            count, 16, 16, 3
        )
        synth_clips.encode(clip, root / name / f"{name}.webm", options={**synth_clips.FAST, "crf": "4"})
    return root


def _numbers(read: np.ndarray) -> np.ndarray:
    """The frame numbers of clips (..., T, H, W, 3) of grey frames, normalised as the pipeline does."""
    grey = read[..., 0].mean(axis=(-1, -2)) * 0.229 * 255 + 0.485 * 255
    return np.rint(grey / 6).astype(int)


@pytest.mark.parametrize("stride", [1, 2])
def test_long_clips_train_on_runs_from_anywhere_and_evaluate_over_their_length(tmp_path, stride):
    """Clips of 20 and 41 frames, windows of 6 (--clip-window): every epoch reads each window once, a run of
    T = 4 frames in each, and over the epochs the runs start at every frame a run can (stride apart); evaluation's
    3 runs of each video lie at its start, middle and end. A name with a space reaches DALI's file list (a link)."""
    from dali_launch.trainer.data.video import video

    split = _numbered(tmp_path / "split", {"a 20": 20, "b41": 41})
    args = replace(ARGS, path=str(split), clip_frames=4, clip_window=6, clip_stride=stride, training=True)
    lengths = {0: clips.strided(20, stride), 1: clips.strided(41, stride)}
    windows = {c: len(clip_windows.starts(n, 6, 4)) for c, n in lengths.items()}
    epoch = sum(windows.values())
    pipe = pipeline_def(lambda: tuple(video(args)), batch_size=epoch, num_threads=1, device_id=None, seed=3)()
    pipe.build()
    assert pipe.epoch_size("video") == epoch
    drawn = {0: set(), 1: set()}
    for _ in range(24):
        read, labels = (np.array(out.as_tensor()) for out in pipe.run())
        numbers, labels = _numbers(read), labels.ravel()
        assert collections.Counter(labels.tolist()) == windows  # each window once an epoch
        assert (np.diff(numbers, axis=1) == stride).all()  # T frames --clip-stride apart
        for label, first in zip(labels, numbers[:, 0]):
            drawn[label].add(first // stride)
    assert drawn == {c: set(range(n - 4 + 1)) for c, n in lengths.items()}

    read, labels = _read(replace(args, training=False, eval_clips=3), 2)
    order = np.argsort(labels)
    firsts = _numbers(read)[order][:, :, 0] // stride
    assert firsts.tolist() == [starts(lengths[c] - 4, 3) for c in (0, 1)]
    assert [starts(lengths[c] - 4, 3)[1] for c in (0, 1)] == ([8, 19] if stride == 1 else [3, 9])


def test_evaluation_takes_evenly_spaced_clips_of_each_video(tmp_path):
    from dali_launch.trainer.data.video import starts

    assert starts(4, 3) == [0, 2, 4] and starts(4, 1) == [2] and starts(5, 2) == [0, 5] and starts(5, 3) == [0, 3, 5]
    read, labels = _read(replace(ARGS, path=str(_split(tmp_path / "split")), eval_clips=3), 4)
    assert read.shape == (4, 3, 8, 16, 16, 3) and sorted(labels.tolist()) == [0, 0, 1, 1]
    assert np.array_equal(read[:, 0, 2:], read[:, 1, :6]) and np.array_equal(read[:, 1, 2:], read[:, 2, :6])


def test_the_task_scores_clips_and_videos():
    """Two videos of 3 clips: the first's clips say 1, 1, 0 (its class 1: two clips of three, the video right),
    the second's 0, 1, 1 with 0 far the surest (its class 0: one clip, and the video by its mean)."""
    import jax.numpy as jnp

    from dali_launch.trainer.tasks.video import video

    scores = {(0, 0): [0, 1], (0, 1): [0, 1], (0, 2): [1, 0], (1, 0): [9, 0], (1, 1): [0, 1], (1, 2): [0, 1]}
    table = jnp.array([scores[(v, k)] for v in range(2) for k in range(3)], jnp.float32)
    step = type(
        "Step", (), {"model": staticmethod(lambda x: table[x[:, 0, 0, 0, 0].astype(int)]), "valid": jnp.ones(2)}
    )
    clips_in = jnp.arange(6, dtype=jnp.float32).reshape(2, 3, 1, 1, 1, 1)
    sums = video(num_classes=2).evaluate(step, {"clips": clips_in, "labels": jnp.array([[1], [0]])})
    assert (float(sums["accuracy"]), round(float(sums["clip_accuracy"]) * 3)) == (2.0, 3)


@pytest.mark.parametrize("name", ["st-cnn", "frame-mean", "vivit-ti16"])
def test_the_video_models_give_logits_of_clips(name):
    import jax

    from dali_launch.trainer.model.registry import create_model

    model = create_model(name, 6)
    clip = jax.ShapeDtypeStruct((2, 8, 16, 16, 3), "float32")
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), clip)
    assert jax.eval_shape(model.apply, variables, clip).shape == (2, 6)
