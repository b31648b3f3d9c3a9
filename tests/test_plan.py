"""The task's decisions (trainer/plan/) and the sample order of a device call (step/sgd.py)."""

from __future__ import annotations

import numpy as np
import pytest
from plans import inputs, planned

from dali_launch.trainer.config import DataConfig, StepConfig, TaskSpec, replaced
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.plan import partition, plan, rematerialise
from dali_launch.trainer.plan import step as plan_step
from dali_launch.trainer.plan.eval import eval_batch_size
from dali_launch.trainer.plan.facts import Facts
from dali_launch.trainer.plan.fit import StateSize
from dali_launch.trainer.plan.step import checkpoint_async, least_padding, parallel, steps_per_call
from dali_launch.trainer.resilience import elastic
from dali_launch.trainer.resilience.start_point import StartPoint
from dali_launch.trainer.step.sgd import sample_order


@pytest.mark.parametrize(
    "setting, platform, batch, readers, expected",
    [
        (0, "gpu", 50, 0, 24),  # the example's batch: 1,200 samples a call
        (0, "gpu", 256, 0, 5),
        (0, "gpu", 4, 0, 64),  # at most 64 steps
        (0, "gpu", 5000, 0, 1),
        (0, "cpu", 50, 0, 1),  # XLA:CPU: one step a call
        (0, "cpu", 50, 4, 2),  # 4 readers share 50 x 2 samples equally
        (0, "gpu", 50, 8, 24),  # 24 x 50 = 1,200, which 8 readers divide
        (0, "gpu", 50, 16, 24),
        (7, "gpu", 50, 0, 7),  # given: kept
    ],
)
def test_steps_per_call(setting, platform, batch, readers, expected):
    k = steps_per_call(setting, platform, batch, readers)
    assert k == expected and (not readers or batch * k % readers == 0)


@pytest.mark.parametrize(
    "k, batch, readers, per_device, expected",
    [
        (19, 64, 0, 16384, 16),  # segmentation's and detection's benchmark: 16 calls of 16 steps, no padding
        (5, 256, 0, 16384, 4),  # contrastive's: 16 of 4, where 13 of 5 padded a step
        (24, 50, 0, 60000, 24),  # Fashion-MNIST: 50 calls of 24 already hold it exactly
        (5, 256, 0, 1281167, 5),  # ImageNet: 113 rows padded, the fewest of 3, 4 and 5 steps
        (19, 64, 0, None, 19),  # a count unknown (a format records/ does not read): the rule's own
        (24, 50, 8, 60000, 24),
        (24, 50, 16, 60800, 16),  # 16 readers share multiples of 8 steps alone: of 24 and 16, 16 pads none
    ],
)
def test_steps_per_call_pads_an_epoch_least(k, batch, readers, per_device, expected):
    assert least_padding(k, batch, readers, per_device) == expected


@pytest.mark.parametrize(
    "setting, stateful, devices, expected",
    [
        ("auto", True, 2, "pmap"),  # BatchNorm on several devices: each normalises its own rows
        ("auto", True, 1, "sharded"),
        ("auto", False, 8, "sharded"),  # no statistics: one program
        ("sharded", True, 2, "sharded"),  # given: kept
        ("pmap", False, 1, "pmap"),
    ],
)
def test_parallel(setting, stateful, devices, expected):
    assert parallel(setting, stateful, devices) == expected


@pytest.mark.parametrize(
    "setting, mib, expected",
    [
        ("auto", 20, False),
        ("auto", 64, True),
        ("auto", 200, True),
        ("on", 1, True),
        ("off", 500, False),
        (True, 1, True),
        (False, 500, False),
    ],
)
def test_checkpoint_async(setting, mib, expected):
    """auto: in the background from 64 MiB of train state (the MLP's 20 MiB in the foreground: faster on an H200);
    True/False: what run directories written before auto recorded."""
    assert checkpoint_async(setting, mib << 20) is expected


@pytest.mark.parametrize(
    "setting, platform, expected", [(0, "gpu", 256), (0, "cpu", 500), (64, "gpu", 64), (64, "cpu", 64)]
)
def test_eval_batch_size(setting, platform, expected):
    """auto: training's batch per device on GPUs (the evaluation's compile reuses training's autotuning: ResNet-50's
    first evaluation 1.0 s cold on an H200, 7.1 s at 500), 500 on CPUs; a value given is kept."""
    assert eval_batch_size(setting, platform, 256) == expected
    spec = replaced(TaskSpec(run_dir="x"), batch_size=256, eval_batch_size=setting)
    assert planned(spec).eval.eval_batch_per_device == (setting or 500)


def test_the_plan_records_every_decision():
    spec = replaced(TaskSpec(run_dir="x"), batch_size=50)
    given = inputs(spec, local_device_count=2, process_count=2, processes_on_host=2)
    decided = plan(given)
    partitioned = partition(decided, given, StateSize((), stateful=False))
    assert partitioned.record() == {  # the partition, once the model's shapes are known
        "platform": "cpu",
        "decoder": "cpu",
        "cuda_graphs": False,
        "parallel": "sharded",
        "mesh": "data:4",
        "offload": "device",
        "checkpoint_async": False,
        "evaluates": True,
        "batch_per_device_step": 50,
        "steps_per_call": 1,
        "readers_per_device": 1,
        "eval_readers_per_device": 1,
        "eval_batch_per_device": 500,  # --eval-batch-size auto on CPUs
        "reader_threads": 2,
        "output_dtype": "float32",
        "feed_workers": 0,
        "sample_order": "shards",
        "lr_scale": 1.0,
        "elastic": None,
        "xla_options": {},  # XLA's defaults on CPUs
        "batchnorm_stats": "float32",
        "pool_grad": "masks",  # the stem pool's gradient on CPUs (plan/step.py's POOL_GRAD)
        "decoded_cache": "off",  # auto keeps no host table on CPUs (plan/data.py's AUTO_KINDS)
        "decoded_cache_mb": 0,
        "decoded_cache_note": "off (auto: no host cache was measured faster than decoding on CPUs; --decoded-cache SIZE keeps one)",
        "attention": "",  # the MLP has none; a ViT's: below
        "remainder": None,  # a fresh start: no epoch begun on another layout
        "xla_flags": {},  # no --deterministic
        "remat": "none",
    }
    assert decided.step.call_batch == 50 and decided.record().keys() < partitioned.record().keys()
    vit = replaced(TaskSpec(run_dir="x", data=DataConfig(pipeline="folders", image_size=32)), model="vit-s16")
    assert planned(vit).step.attention == "xla"  # CPUs: XLA's; GPUs in bf16 probe cuDNN's
    data = decided.data  # what the pipelines are built from
    assert (data.reader_threads, data.decoder) == (2, "cpu")


def test_bf16_pipelines_output_float16():
    """DALI has no bfloat16: under --precision bf16 the pipelines hand over half the bytes as float16."""
    spec = replaced(TaskSpec(run_dir="x"), precision="bf16")
    assert planned(spec).data.output_dtype == "float16"
    from dali_launch.trainer.data.dali import Split, pipeline_args

    assert pipeline_args(Split("x", True, 8), 0, 1, 8, planned(spec).data).output_dtype == "float16"  # what DALI gets
    kept = replaced(TaskSpec(run_dir="x", data=DataConfig(output_dtype="float32")), precision="bf16")
    assert planned(kept).data.output_dtype == "float32"


def test_a_global_order_checkpoint_of_another_size_sets_the_batch_and_steps():
    """elastic.py's plan wins over --batch-size and auto --steps-per-call (the checkpoint's are kept)."""
    spec = replaced(TaskSpec(run_dir="x", data=DataConfig(sample_order="global")), batch_size=50)
    order = {"devices": 4, "global_batch": 200, "steps_per_call": 3, "position": 0}
    start = StartPoint(step=0, order=order, plan=elastic.plan(order, 2, spec.step.elastic_batch))
    step = planned(spec, start=start, process_count=2).step
    assert (step.batch_per_device_step, step.steps_per_call, step.lr_scale) == (100, 3, 1.0)
    assert step.elastic["devices_before"] == 4 and step.elastic["rule"] == "keep"


def test_sample_order_takes_the_readers_in_turn():
    """Reader r's i-th row is the device's sample i*R + r: a call of 2 steps of 4 samples from 2
    readers is the first 8 samples of the device's order, whatever the call holds."""
    reader_major = np.array([0, 2, 4, 6, 1, 3, 5, 7])  # reader 0 read samples 0,2,4,6; reader 1 the odd ones
    assert sample_order(reader_major, 2).tolist() == list(range(8))
    assert sample_order(reader_major[:, None].repeat(3, 1), 2)[:, 0].tolist() == list(range(8))
    assert sample_order(reader_major, 1).tolist() == reader_major.tolist()


def test_a_state_no_mesh_of_the_job_holds_is_refused_naming_the_mesh_that_would():
    """--mesh auto on 2 devices of a 10 MiB pool, a 38 MiB state with its gradients: no fsdp count of the job
    holds it, and the line names the one that would, over the devices it needs."""
    mib = 1 << 20
    size = StateSize((("params/w", (1024, 1024, 3), 4), ("opt_state/mu", (1024, 1024, 3), 4)))  # 12 + 12 MiB
    small = Facts("cpu", local_device_count=2, pool_bytes=10 * mib)
    with pytest.raises(UsageError) as refused:
        plan_step.partitioned(planned(TaskSpec(run_dir="x")).step, StepConfig(), small, size, "auto")
    said = str(refused.value)
    assert said.startswith("the train state and its gradients need 36.0 MiB per device under --mesh data:2"), said
    assert (
        "no fsdp count over the job's 2 devices fits it; --mesh fsdp:4 over 4 devices would need about 9.0 MiB each"
        in said
    )


def test_remat_auto_turns_to_blocks_where_the_compiled_step_exceeds_the_pool_and_the_model_takes_it():
    """The plan's last stage (plan.rematerialise) on what the first call needs of a device: a ViT's step over
    the pool recomputes its blocks; one within it, or a model that takes no --remat, keeps none."""
    mib = 1 << 20
    for model, needs, expected in (
        ("vit-ti16", 64 * mib, "blocks"),
        ("vit-ti16", 8 * mib, "none"),
        ("mlp", 64 * mib, "none"),
    ):
        spec = replaced(
            TaskSpec(run_dir="x", data=DataConfig(pipeline="folders", image_size=32)), model=model, remat="auto"
        )
        given = inputs(spec, pool_bytes=16 * mib)
        decided = plan(given)
        assert decided.step.remat == "none"  # auto: nothing recomputed until the step has compiled
        assert rematerialise(decided, given, needs).step.remat == expected
