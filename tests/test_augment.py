"""--augment in DALI (trainer/data/augment.py): every operation of RandAugment's and TrivialAugment's suites
changes images when applied alone, AutoAugment's policy too, the same for the same seed; a pipeline
checkpoint taken mid-run restores the augmentation's random choices exactly (bit-exact resumes); a
pipeline of one's own that never applies --augment is refused at its build."""

from __future__ import annotations

import warnings
from dataclasses import replace

import jax
import numpy as np
import pytest
from nvidia.dali import fn, pipeline_def
from plans import decided

from dali_launch.trainer.config import DataConfig
from dali_launch.trainer.data import augment, dali, shards
from dali_launch.trainer.data.batches import Readers
from dali_launch.trainer.data.contract import PipelineArgs
from dali_launch.trainer.errors import UsageError

SIDE, ROWS = 32, 16
ARGS = PipelineArgs("unused", 0, 1, ROWS, True, False, "cpu", 0, 4, SIDE)


def images() -> list[np.ndarray]:
    """Textured uint8 crops that span 60..190, not the whole range: auto_contrast and equalize change them too."""
    rng = np.random.default_rng(0)
    ramp = np.linspace(60, 190, SIDE)[None, :, None] * np.ones((SIDE, 1, 3))
    return [np.clip(ramp + rng.normal(0, 12, (SIDE, SIDE, 3)), 60, 190).astype(np.uint8) for _ in range(ROWS)]


def run(outputs, seed: int) -> list[np.ndarray]:
    """One batch of a CPU pipeline whose outputs are `outputs(images)`, each as a (rows, H, W, C) array."""

    @pipeline_def(enable_conditionals=True)
    def pipe():
        return tuple(outputs(fn.external_source(source=lambda: images(), batch=True, layout="HWC")))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # not ours: DALI's own import-time notices
        p = pipe(batch_size=ROWS, num_threads=1, device_id=None, seed=seed)
        p.build()
        return [np.stack([np.asarray(t) for t in out]) for out in p.run()]


@pytest.mark.parametrize("policy, magnitude", [("randaugment", (1, 30)), ("trivialaugment", None)])
def test_each_operation_alone_changes_images_and_repeats_for_a_seed(policy, magnitude):
    args = replace(ARGS, augment=policy, randaugment=magnitude or (2, 9))
    names = [op.name for op in augment.suite(policy)]
    outputs = lambda x: [augment.apply(x, args, only=name) for name in names]
    first, again = run(outputs, seed=3), run(outputs, seed=3)
    unaugmented = np.stack(images())
    for name, out, out_again in zip(names, first, again):
        np.testing.assert_array_equal(out, out_again, err_msg=name)  # a seed, the same images
        changed = (out != unaugmented).any((1, 2, 3))
        if name == "identity":
            assert not changed.any()
        else:
            assert changed.sum() >= ROWS // 2, (name, changed)  # TrivialAugment's magnitude 0 may leave a few


def test_autoaugments_policy_changes_images_and_repeats_for_a_seed():
    args = replace(ARGS, augment="autoaugment")
    (first,), (again,), (other,) = (run(lambda x: [augment.apply(x, args)], seed) for seed in (3, 3, 4))
    np.testing.assert_array_equal(first, again)
    assert (first != np.stack(images())).any((1, 2, 3)).sum() >= ROWS // 2
    assert (first != other).any()


def test_evaluation_and_none_are_left_alone():
    same = run(
        lambda x: [augment.apply(x, replace(ARGS, augment="randaugment", training=False)), augment.apply(x, ARGS)], 0
    )
    for out in same:
        np.testing.assert_array_equal(out, np.stack(images()))


@pytest.mark.parametrize("policy", augment.POLICIES)
def test_a_checkpoint_mid_run_restores_the_augmentations_random_state(synth_sets, policy):
    """The trainer's own pipelines (tfrecord, 32×32 crops): 3 batches, DALI's checkpoints, 4 more; pipelines
    rebuilt from those checkpoints give the same 4, bit for bit, across the epoch's end (210 samples)."""
    device = jax.local_devices()[:1]
    config = DataConfig(
        data_dir=str(synth_sets["tfrecord"]), pipeline="tfrecord", num_classes=4, image_size=SIDE,
        decoder="cpu", reader_threads=1, output_dtype="float32", augment=policy,
    )  # fmt: skip
    split, readers = (
        dali.Split(f"{config.data_dir}/training", True, 64, 5),
        Readers(device, device, shards.Sharding(0, 1, 1, 1)),
    )
    build = lambda checkpoints=None: dali.build(
        split, readers, decided(config), checkpoints=checkpoints, start=dali.Start("shards", 5, 1, 64, 1)
    )
    data = build()
    for _ in range(3):
        data.next()
    checkpoints = [p.checkpoint() for p in data.pipes]
    after = [data.next() for _ in range(4)]
    restored = build(checkpoints)
    for a, b in zip(after, (restored.next() for _ in range(4))):
        np.testing.assert_array_equal(a["images"], b["images"])
        np.testing.assert_array_equal(a["labels"], b["labels"])


def test_a_pipeline_that_never_applies_it_is_refused():
    with pytest.raises(UsageError) as e:
        augment.check_applied(replace(ARGS, augment="trivialaugment"), "mypkg.pipe:make")
    assert str(e.value) == (
        "--augment trivialaugment: --pipeline mypkg.pipe:make never calls args.auto_augment(images); call it on its "
        "uint8 HWC training crops, or use --augment none"
    )
    augment.check_applied(replace(ARGS, augment="trivialaugment", training=False), "mypkg.pipe:make")  # evaluation
