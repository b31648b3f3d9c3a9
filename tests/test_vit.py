"""The ViTs (model/vit.py), their attention (model/attention.py) and layer decay (step/layer_decay.py):
shapes and parameter counts without computing, the padded attention against the plain one, drop path,
--remat blocks, the BEiT layer factors, and the launcher's constants held to the trainer's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dali_launch.launcher.route import recipe_checks
from dali_launch.trainer.data import augment
from dali_launch.trainer.errors import UsageError
from dali_launch.trainer.model import attention, vit
from dali_launch.trainer.model.registry import MODELS, create_model
from dali_launch.trainer.step import layer_decay

KEYS = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}


def shapes(name: str, classes: int = 1000, side: int = 224, **options):
    model = create_model(name, classes, **options)
    return jax.eval_shape(lambda x: model.init(KEYS, x), jax.ShapeDtypeStruct((1, side, side, 3), jnp.float32))


@pytest.mark.parametrize(
    "name, millions", [("vit-ti16", 5.72), ("vit-s16", 22.05), ("vit-b16", 86.57)]
)  # timm's vit_{tiny,small,base}_patch16_224
def test_parameter_counts_are_the_published_ones(name, millions):
    count = sum(np.prod(x.shape) for x in jax.tree.leaves(shapes(name)))
    assert count / 1e6 == pytest.approx(millions, abs=0.01)


def test_gap_and_cls_pooling_and_the_block_layout():
    gap, cls = shapes("vit-s16", side=32)["params"], shapes("vit-s16", side=32, vit_pool="cls")["params"]
    assert "cls" in cls and "cls" not in gap and cls["cls"].shape == (1, 1, 384)
    assert gap["pos_embedding"].shape == (1, 4, 384)  # 32×32: 2×2 patches; the class token is not embedded
    block = gap["Transformer"]["encoderblock"]  # big_vision's scan layout: every block parameter stacked
    assert block["MlpBlock_0"]["Dense_0"]["kernel"].shape == (12, 384, 1536)
    assert block["MultiHeadDotProductAttention_0"]["query"]["kernel"].shape == (12, 384, 6, 64)
    assert gap["head"]["kernel"].shape == (384, 1000)


def test_an_image_side_not_divisible_by_the_patch_is_one_line():
    with pytest.raises(UsageError) as e:
        shapes("vit-ti16", side=40)
    assert str(e.value) == (
        "the ViTs cut images into 16×16 patches, but the pipeline gives 40×40; use an --image-size divisible by 16, "
        "e.g. 32"
    )


def test_the_padded_attention_is_the_plain_one_forward_and_backward():
    """cudnn-padded's padding and mask, run with XLA's kernel (the only one on CPU)."""
    q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (2, 5, 3, 8)) for i in range(3))
    attend = jax.jit(attention.padded, static_argnums=(3, 4))
    np.testing.assert_allclose(attend(q, k, v, 64, "xla"), attend(q, k, v, 5, "xla"), atol=1e-5)
    loss = lambda q, k, v, n: (attention.padded(q, k, v, n, "xla") ** 2).sum()
    grads = lambda n: jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(q, k, v, n)
    for a, b in zip(grads(64), grads(5)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert attention.padded_length(197, "cudnn-padded") == 256 and attention.padded_length(197, "cudnn") == 197


def test_the_attention_choice():
    shape = vit.attention_shape("vit-b16", 224, "cls")
    assert shape == (197, 12, 64) and vit.attention_shape("resnet50", 224, "gap") is None
    assert attention.choose("auto", "cpu", "bf16", shape) == "xla"  # no probe on CPUs
    assert attention.choose("auto", "gpu", "fp32", shape) == "xla"  # cuDNN's kernels are 16-bit only
    assert attention.choose("auto", "gpu", "bf16", shape) == "xla"  # the form measured on an H200
    assert attention.choose("xla", "gpu", "bf16", shape) == "xla"  # given: taken as it is
    assert attention.choose("auto", "cpu", "bf16", None) == ""  # not one of our ViTs
    assert attention.phrase("cudnn-padded", 197) == "attention cudnn (197 tokens padded to 256)"
    with pytest.raises(UsageError) as e:  # a task on CPU devices (--platform auto without GPUs) given cuDNN
        attention.choose("cudnn", "cpu", "bf16", shape)
    assert str(e.value) == (
        "--attention cudnn runs cuDNN's 16-bit kernels on GPUs, but this task has cpu devices and --precision bf16; "
        "use --attention xla or auto"
    )
    with pytest.raises(UsageError) as e:  # given on a GPU, it is probed: here, where XLA:CPU cannot lower it
        attention.choose("cudnn-padded", "gpu", "bf16", shape)
    assert str(e.value).startswith("--attention cudnn-padded does not compile for 197 tokens of 12 heads here (")
    assert str(e.value).endswith("); use --attention xla (what auto takes)")


def test_a_cudnn_form_traced_in_float32_takes_xla_kernel():
    # The model's init traces in float32 on the CPU backend (set_up.create_train_state): cuDNN's kernels
    # take 16 bits only, so a ViT built with a cuDNN form must still initialise there (it failed on a GPU).
    q, k, v = jax.random.normal(jax.random.PRNGKey(0), (3, 2, 5, 2, 8))
    want = jax.nn.dot_product_attention(q, k, v, implementation="xla")
    for form in ("cudnn", "cudnn-padded"):
        np.testing.assert_array_equal(attention.attend(q, k, v, form), want)
    model = create_model("vit-ti16", 4, attention="cudnn")
    cpu = jax.local_devices(backend="cpu")[0]
    variables = jax.jit(lambda x: model.init(KEYS, x))(jax.device_put(np.zeros((1, 32, 32, 3), np.float16), cpu))
    assert variables["params"]["head"]["kernel"].shape == (192, 4)


def test_drop_path_drops_per_sample_while_training_only():
    model = create_model("vit-ti16", 4, drop_path=0.5)
    x = jax.random.normal(jax.random.PRNGKey(2), (8, 32, 32, 3))
    variables = jax.jit(lambda x: model.init(KEYS, x))(x[:1])
    variables = jax.tree.map(lambda p: p + 0.01, variables)  # a head of zeros would hide everything
    run = jax.jit(lambda key, train: model.apply(variables, x, train=train, rngs={"dropout": key}), static_argnums=1)
    apply = lambda key, train: run(jax.random.PRNGKey(key), train)
    np.testing.assert_array_equal(apply(0, False), apply(1, False))  # evaluation: deterministic
    assert not np.allclose(apply(0, True), apply(1, True))  # training: another key drops other branches
    np.testing.assert_array_equal(apply(0, True), apply(0, True))  # the same key, the same drops
    plain = jax.jit(
        lambda train: create_model("vit-ti16", 4).apply(variables, x, train=train, rngs=KEYS), static_argnums=0
    )
    np.testing.assert_array_equal(plain(True), plain(False))  # --drop-path 0: training computes what evaluation does


def test_remat_blocks_gives_the_same_parameters_and_gradients_for_a_fraction_of_the_temporaries():
    """--remat blocks recomputes each block's activations in the backward pass: the same parameter tree, the same
    loss and gradients (drop path's draws too), and XLA's temporaries for the gradient a fraction of the kept
    activations' (vit-ti16 at 64×64, batch 16, on CPU: about a tenth, 9.1 against 87.7 MiB)."""
    images, labels = jax.random.normal(jax.random.PRNGKey(2), (16, 64, 64, 3)), jnp.arange(16) % 10
    variables = create_model("vit-ti16", 10).init(KEYS, images[:1])

    def loss_of(model):
        logits = lambda v: model.apply(v, images, train=True, rngs={"dropout": KEYS["dropout"]})
        return lambda v: -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(v)), labels[:, None], axis=1))

    results, temporaries = {}, {}
    for remat in ("none", "blocks"):
        assert jax.tree.structure(shapes("vit-ti16", 10, 64, remat=remat)) == jax.tree.structure(variables)
        step = jax.jit(jax.value_and_grad(loss_of(create_model("vit-ti16", 10, drop_path=0.2, remat=remat))))
        results[remat] = step(variables)
        temporaries[remat] = step.lower(variables).compile().memory_analysis().temp_size_in_bytes
    np.testing.assert_allclose(results["blocks"][0], results["none"][0], rtol=1e-6)
    for a, b in zip(jax.tree.leaves(results["blocks"][1]), jax.tree.leaves(results["none"][1])):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert temporaries["blocks"] < temporaries["none"] / 3, temporaries


def test_remat_blocks_keeps_the_blocks_loop_where_they_are_otherwise_unrolled(monkeypatch):
    """On GPUs the blocks' scan is unrolled; under --remat blocks it stays a loop (vit.unroll), else XLA schedules
    each block's recomputation beside the forward pass and keeps every activation again: here a 4-block ViT with
    its blocks as a GPU would have them, compiled by XLA:CPU: 3.7 MiB of temporaries with remat, 10.3 without (and
    10.3 with remat unrolled, as before)."""
    monkeypatch.setattr(vit.jax, "default_backend", lambda: "gpu")  # read when the model is traced
    images = jax.random.normal(jax.random.PRNGKey(2), (16, 64, 64, 3))
    temporaries = {}
    for remat in (False, True):
        model = vit.ViT(10, width=96, depth=4, mlp_dim=384, num_heads=3, remat=remat)
        variables = jax.eval_shape(model.init, KEYS, images[:1])
        step = jax.jit(jax.grad(lambda v, model=model: jnp.mean(model.apply(v, images, train=True) ** 2)))
        temporaries[remat] = step.lower(variables).compile().memory_analysis().temp_size_in_bytes
    assert temporaries[True] < temporaries[False] / 2, temporaries
    assert vit.unroll(4, False, "gpu") == 4 and vit.unroll(4, True, "gpu") == 1


def test_layer_decay_factors_are_beits():
    params = shapes("vit-ti16", side=32)["params"]
    factors = layer_decay.scales(params, 0.5)
    assert float(factors["embedding"]["kernel"].reshape(-1)[0]) == 0.5**13  # layer 0 of 13
    assert float(factors["pos_embedding"].reshape(-1)[0]) == 0.5**13
    blocks = np.asarray(factors["Transformer"]["encoderblock"]["MlpBlock_0"]["Dense_0"]["kernel"]).reshape(-1)
    np.testing.assert_array_equal(blocks, 0.5 ** np.arange(12, 0, -1))  # block i is layer i + 1
    assert factors["Transformer"]["encoderblock"]["LayerNorm_0"]["scale"].shape == (12, 1)  # broadcasts per block
    assert (
        float(factors["head"]["kernel"].reshape(-1)[0])
        == float(factors["Transformer"]["encoder_norm"]["scale"][0])
        == 1
    )


def test_the_launchers_constants_are_the_trainers():
    """The launcher checks without importing flax or DALI; its copies of their numbers must hold."""
    assert recipe_checks.PATCH == vit.PATCH
    assert recipe_checks.RANDAUGMENT_OPS == len(augment.suite("randaugment"))
    assert recipe_checks.MAGNITUDE_BINS == augment.MAGNITUDE_BINS
    assert [m for m in MODELS if recipe_checks.is_vit(m)] == list(vit.VARIANTS)
