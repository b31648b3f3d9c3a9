"""`--model`: the built-in models by name, and a factory of the user's own loaded and made as model/contract.py
says (entry_points.py: what the three loaders share). Nothing heavy at import: the launcher checks a built-in
name at no cost; Flax is imported where a model is made (`make`).
"""

from __future__ import annotations

import inspect

from dali_launch.trainer import entry_points
from dali_launch.trainer.entry_points import Kind, Sent

MODELS = {
    "mlp": "dali_launch.trainer.model.models:MLP",
    "cnn": "dali_launch.trainer.model.models:CNN",
    "cnn-nnx": "dali_launch.trainer.model.cnn_nnx:CNN",
    "resnet18": "dali_launch.trainer.model.models:ResNet18",
    "resnet50": "dali_launch.trainer.model.resnet:resnet50",
    "vit-ti16": "dali_launch.trainer.model.vit:vit_ti16",
    "vit-s16": "dali_launch.trainer.model.vit:vit_s16",
    "vit-b16": "dali_launch.trainer.model.vit:vit_b16",
    "unet": "dali_launch.trainer.model.unet:UNet",
    "simclr-cnn": "dali_launch.trainer.model.contrastive:SimCLR",
    "centernet": "dali_launch.trainer.model.centernet:CenterNet",
    "st-cnn": "dali_launch.trainer.model.video:SpaceTimeCNN",
    "frame-mean": "dali_launch.trainer.model.video:FrameMean",
    "vivit-ti16": "dali_launch.trainer.model.video:vivit_ti16",
    "audio-cnn": "dali_launch.trainer.model.audio_cnn:AudioCNN",
}
# The built-ins with blocks that --mesh's tensor axis splits (plan/mesh.py's TENSOR_RULES name their layers): vit.py's
TENSOR_SPLIT = tuple(name for name, target in MODELS.items() if target.startswith("dali_launch.trainer.model.vit:"))
# [model] settings a model factory may name
MODEL_OPTIONS = ("drop_path", "vit_pool", "attention", "remat", "batchnorm_stats", "pool_grad")


def _call(signature: inspect.Signature) -> tuple[str, tuple, dict]:
    """factory(num_classes=N); a factory naming `rngs` is Flax NNX's (model/nnx_model.py) and given them."""
    if "rngs" in signature.parameters:
        return "factory(num_classes=N, rngs=nnx.Rngs(seed))", (), {"num_classes": 10, "rngs": None}
    return "factory(num_classes=N)", (), {"num_classes": 10}


MODEL = Kind("model", "factory", "docs/models.md", lambda: MODELS, _call)


def load(name, sent: Sent | None = None):
    """The factory `--model name` stands for (entry_points.load)."""
    return entry_points.load(MODEL, name, sent)


def check(name: str, num_classes: int = 10, sent: Sent | None = None) -> None:
    """What the launcher calls before writing anything: a built-in name costs nothing; another is imported and
    its factory called abstractly (jax.eval_shape: nothing computed, no device taken), so a broken contract is
    refused before the run directory exists rather than at the task's start."""
    if name not in MODELS:
        create_model(name, num_classes, sent=sent)


def create_model(name: str, num_classes: int, adapter: str | None = None, sent: Sent | None = None, **options):
    """`--model NAME`, loaded and made (`make`)."""
    return make(name, load(name, sent), num_classes, options, adapter)


def make(name: str, factory, num_classes: int, options: dict, adapter: str | None = None):
    """The module `factory` (--model `name`'s) makes, as model/contract.py says: a flax.linen.Module, or an NNX
    module presented as the trainer calls a Linen one (`adapter`: contract.ADAPTER unless a benchmark names
    another). `options` (model_options) go to a Linen factory that names them as parameters."""
    from dali_launch.trainer.model import contract  # Flax and JAX: only where a model is made

    options = {k: v for k, v in options.items() if k in entry_points.named(factory)}
    return contract.make(name, factory, num_classes, takes_rngs(factory), adapter or contract.ADAPTER, options)


def model_options(model) -> dict:
    """The flags a model factory may take beside num_classes, from the [model] settings as given."""
    return {name: getattr(model, name) for name in MODEL_OPTIONS}


def run_model(spec, sent: Sent | None = None):
    """The run's model: --model with --num-classes and the model options as the settings give them."""
    return create_model(spec.model.model, spec.data.num_classes, sent=sent, **model_options(spec.model))


def takes(factory, option: str) -> bool:
    """Whether a model `factory` is given `option` (one of MODEL_OPTIONS): it names it."""
    return option in entry_points.named(factory)


def takes_rngs(factory) -> bool:
    """A model factory that names an `rngs` parameter is called with nnx.Rngs (an NNX constructor is one)."""
    signature = entry_points.signature_of(factory)
    return signature is not None and "rngs" in signature.parameters
