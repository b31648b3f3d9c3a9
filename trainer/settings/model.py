"""The model: which network, its precision and its own options (the ones a factory may name), what it starts from.

The [model] table of a run's configuration (trainer/config.py nests it); a field's `help` is its flag's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dali_launch.trainer.settings.fields import opt


@dataclass(frozen=True)
class ModelConfig:
    model: str = opt(
        "mlp",
        "mlp, cnn, cnn-nnx, resnet18, resnet50, vit-ti16/s16/b16, unet, simclr-cnn, or package.module:factory.",
        details=(
            "Model: mlp (the example's 784-784-1024-1024-10 MLP), cnn (small, 28x28 images), cnn-nnx (its "
            "Flax NNX twin), resnet18 (GroupNorm), resnet50 (v1.5, BatchNorm), vit-ti16, vit-s16, vit-b16 "
            "(big_vision's ViTs, 16x16 patches), unet (per-pixel logits, for --task segmentation), "
            "simclr-cnn (--task contrastive's encoder, projection and probe), or "
            "package.module:factory of your own, Linen or NNX (see docs/models.md)."
        ),
    )
    precision: str = opt(
        "fp32",
        "Compute precision: fp32, or bf16 (parameters stay float32).",
        details=(
            "Compute precision: fp32, or bf16 (the model's forward and backward pass in bfloat16; parameters, "
            "gradients and optimizer state stay float32)."
        ),
        choices=("fp32", "bf16"),
    )
    drop_path: float = opt(
        0.0,
        "ViTs: stochastic depth, the deepest block's drop rate.",
        details=(
            "Stochastic depth of the ViTs: the largest rate a block's residual branches are dropped at (rising "
            "linearly from 0 at the first block, as DeiT), per sample while training."
        ),
    )
    vit_pool: str = opt(
        "gap",
        "ViTs: pool tokens by gap (global average) or cls (a class token).",
        details=(
            "How the ViTs pool their tokens for the head: gap (global average, big_vision's ImageNet recipe) or cls "
            "(a class token)."
        ),
        choices=("gap", "cls"),
    )
    attention: str = opt(
        "auto",
        "ViTs' attention: xla, cudnn, cudnn-padded, or auto.",
        details=(
            "The ViTs' attention (jax.nn.dot_product_attention): xla, cudnn (cuDNN's fused kernel), cudnn-padded "
            "(the sequence padded to a multiple of 64 for it, the padding masked), or auto: on GPUs in bf16 the first "
            "cuDNN form that compiles for the model's shapes, else xla. The choice is in rank_map.json and the rank line."
        ),
        choices=("auto", "xla", "cudnn", "cudnn-padded"),
    )
    remat: str = opt(
        "auto",
        "Recompute activations: none, blocks, or auto (only where the step would not fit).",
        details=(
            "Rematerialisation: none, blocks (each ViT encoder block's activations recomputed in the backward pass "
            "rather than kept, as big_vision's remat: one more forward pass of the blocks a step for a fraction of their "
            "activations' memory), or auto: none, unless the compiled step does not fit a device at its batch and the "
            "model takes blocks; the choice is in rank_map.json. A factory of yours naming `remat` is given it."
        ),
        choices=("auto", "none", "blocks"),
    )
    batchnorm_stats: str = opt(
        "auto",
        "BatchNorm statistics' precision: float32, compute, or auto.",
        details=(
            "Precision of BatchNorm's batch statistics (mean, variance) in a model whose factory takes `batchnorm_stats` (the "
            "built-in resnet50): float32 (Flax's default, stable in bf16 training), compute (the --precision dtype: "
            "fewer bytes moved), or auto (plan/step.py's BATCHNORM_STATS: float32, the faster one measured)."
        ),
        choices=("auto", "float32", "compute"),
    )
    pool_grad: str = opt(
        "auto",
        "ResNets' stem max-pool gradient: scatter, masks, or auto.",
        details=(
            "How the gradient of the ImageNet stem's 3x3/2 max pool is computed in the built-in resnet50 and resnet18 "
            "(model/pooling.py): scatter (JAX's select_and_scatter) or masks (nine offset masks, no scatter: XLA's "
            "deterministic scatter is slow on GPUs). auto (plan/step.py's POOL_GRAD): masks on CPUs and under "
            "--deterministic, else scatter (docs/performance.md says what each costs)."
        ),
        choices=("auto", "scatter", "masks"),
    )
    init_from: str | None = opt(
        None,
        "Fine-tune from a run's (or an Orbax) checkpoint's parameters.",
        details=(
            "Fine-tune: start from the parameters (and BatchNorm statistics) of a run directory's newest "
            "checkpoint (a run's name under --run-root too), one of its checkpoints/STEP folders or an Orbax checkpoint of a compatible model; not its "
            "optimizer, step or data position. A head of another --num-classes is re-initialised."
        ),
        path=True,
    )
