"""The ViTs' attention: `jax.nn.dot_product_attention`, and which implementation a task uses (--attention).

    xla           XLA's own fusion of the two matmuls and the softmax; runs everywhere
    cudnn         cuDNN's fused (flash) attention kernel: GPUs, bf16/fp16 only, and only the shapes it takes
    cudnn-padded  the same with the sequence padded to a multiple of PAD (its keys masked out through
                  `key_value_seq_lengths`, its query rows dropped after): on one H200 cuDNN refused ViT-B/16's
                  197 tokens; a flash kernel works in tiles of 64 rows anyway

`auto` is decided once per task (plan/step.py, recorded in rank_map.json) to xla: the form measured on one H200
(ViT-S/16 and ViT-B/16 train within a few per cent of their step alone with it: docs/performance.md); the
cuDNN forms are taken when
given, after a probe that their forward and backward pass compile for the model's own shapes here.
A cuDNN form computes in 16 bits only: a pass in float32 (the model's init, traced on the CPU backend with
float32 parameters) takes XLA's kernel, whose result is the same attention.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dali_launch.trainer.errors import UsageError

PAD = 64
SIXTEEN_BITS = (jnp.bfloat16, jnp.float16)  # what cuDNN's fused kernels take


def padded_length(length: int, implementation: str) -> int:
    return -(-length // PAD) * PAD if implementation == "cudnn-padded" else length


def attend(query, key, value, implementation: str = "xla"):
    """Attention over (batch, tokens, heads, head_dim) inputs; Flax's MultiHeadDotProductAttention calls
    it as its `attention_fn` (which passes only the arguments a function names)."""
    if implementation == "xla" or query.dtype not in SIXTEEN_BITS:
        return jax.nn.dot_product_attention(query, key, value, implementation="xla")
    return padded(query, key, value, padded_length(query.shape[1], implementation), "cudnn")


def padded(query, key, value, length: int, kernel: str):
    """Attention with the sequence padded to `length`: the padding's keys are masked out (cuDNN's padding
    mask, from `key_value_seq_lengths`), its query rows computed and dropped."""
    tokens = query.shape[1]
    if length == tokens:
        return jax.nn.dot_product_attention(query, key, value, implementation=kernel)
    pad = lambda x: jnp.pad(x, ((0, 0), (0, length - tokens), (0, 0), (0, 0)))
    lengths = jnp.full((query.shape[0],), tokens, jnp.int32)
    out = jax.nn.dot_product_attention(
        pad(query), pad(key), pad(value), key_value_seq_lengths=lengths, implementation=kernel
    )
    return out[:, :tokens]


def choose(setting: str, platform: str, precision: str, shape: tuple[int, int, int] | None) -> str:
    """--attention resolved. `shape`: the model's (tokens, heads, head_dim), None for a model without
    attention of ours (then ""). auto is xla; a cuDNN form, given, must compile for that shape here."""
    if shape is None:
        return ""
    if setting in ("xla", "auto"):
        return "xla"
    if platform != "gpu" or precision != "bf16":
        raise UsageError(
            f"--attention {setting} runs cuDNN's 16-bit kernels on GPUs, but this task has {platform} devices "
            f"and --precision {precision}; use --attention xla or auto"
        )
    why = refusal(setting, shape)
    if why:
        raise UsageError(
            f"--attention {setting} does not compile for {shape[0]} tokens of {shape[1]} heads here ({why}); "
            f"use --attention xla (what auto takes)"
        )
    return setting


def refusal(implementation: str, shape: tuple[int, int, int], batch: int = 2) -> str | None:
    """Why the attention's forward and backward pass do not compile on this task's GPU in bf16 (None: they do)."""
    tokens, heads, head_dim = shape
    x = jax.ShapeDtypeStruct((batch, tokens, heads, head_dim), jnp.bfloat16)
    loss = lambda q, k, v: attend(q, k, v, implementation).astype(jnp.float32).sum()
    try:
        jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(x, x, x).compile()
    except Exception as e:  # cuDNN, XLA or JAX refused it, at trace, lowering or compile time
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return None


def phrase(implementation: str, tokens: int) -> str:
    """The rank line's words for it."""
    if not implementation:
        return ""
    if implementation == "cudnn-padded":
        return f"attention cudnn ({tokens} tokens padded to {padded_length(tokens, implementation)})"
    return f"attention {implementation} ({tokens} tokens)"
