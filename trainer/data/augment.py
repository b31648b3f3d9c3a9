"""--augment: RandAugment, TrivialAugment Wide or AutoAugment on training images, inside the DALI pipeline.

Built on `nvidia.dali.auto_aug`: each sample draws its operations (and signed magnitudes) from DALI
random operators, and DALI's conditionals run only the chosen operation on it, on the pipeline's
device (the GPU under --decoder mixed). They follow the crop and flip, on uint8 HWC crops of
--image-size (every built-in image pipeline calls `args.auto_augment` there; a pipeline of one's own
calls it too, or --augment is refused at its build). The random operators are seeded from the
pipeline's seed (--seed + shard) and their states are in DALI's pipeline checkpoints, so a run
repeats from --seed and resumes bit-exactly on CPU (tests/test_augment.py: a checkpoint/restore round
trip through conditionals and auto_aug's random choices gives the uninterrupted pipeline's batches).

Translations are relative to the crop (DALI's `shape`), at each policy's reference scale at 224
pixels: RandAugment 100/224 and AutoAugment 150/331 as timm and torchvision, TrivialAugment Wide
torchvision's 32 pixels of 224, so a 32-pixel crop shifts as far, in its own terms, as a 224 one.
"""

from __future__ import annotations

import contextlib
import warnings

POLICIES = ("randaugment", "trivialaugment", "autoaugment")
MAGNITUDE_BINS = 31  # RandAugment's M (and TrivialAugment's magnitudes) are bins 0..30
MAX_TRANSLATE = {"randaugment": 100 / 224, "trivialaugment": 32 / 224, "autoaugment": 150 / 331}


# What DALI's autograph rewrites of a conditional graph (see transpile_less): the functions that lead to a branch
# on data (ours: the graph, the pipeline functions, --augment's apply; auto_aug's selection); not the rest of
# this package nor auto_aug's Python helpers and operations, nor the standard library's json and importlib.
REWRITTEN = tuple(f"dali_launch.trainer.data.{name}" for name in ("dali", "contract", "pipelines", "views", "augment"))
PLAIN_MODULES = (
    *(f"nvidia.dali.auto_aug.{name}" for name in ("core._augmentation", "core._args", "augmentations")),
    "dali_launch",
    "json",
    "importlib",
)


def transpile_less() -> None:
    """Leaves plain Python to run as it is. DALI's autograph rewrites each function a conditional graph calls
    (its source parsed and transformed, ~0.1 s a function, once a process) unless a rule excludes it, and its
    rules exclude nothing of ours, json or importlib, and include all of nvidia.dali.auto_aug: for --augment, 83
    functions (auto_aug's Augmentation class, argument helpers and operations; our sample scans and readers)
    at every process's first pipeline build. Only those on the way to a branch on data need it (REWRITTEN,
    auto_aug's selection and policies); elsewhere an `if` tests Python values, which a rewritten `if` runs as
    Python anyway, and one that met a DataNode would fail loudly (DataNode.__bool__ raises), not differ. Measured
    on the 2-core CPU machine: 21 functions rewritten; the same batches from RandAugment, TrivialAugment Wide
    and AutoAugment, 5 of 16 images each; `benchmarks/imagenet.py --part data --augment randaugment --smoke-cpu`
    5.2–5.4 s against 7.5 s. Prepended to DALI's rules (the first that matches wins), after `import nvidia.dali`
    has set them; a DALI without this module keeps its own."""
    try:
        from nvidia.dali._autograph.core import config
    except ImportError:
        return
    rules = (*map(config.Convert, REWRITTEN), *map(config.DoNotConvert, PLAIN_MODULES))
    config.CONVERSION_RULES = rules + config.CONVERSION_RULES


def suite(policy: str, size: int = 224) -> list:
    """The operations RandAugment or TrivialAugment choose from (DALI's suites, translations relative)."""
    from nvidia.dali.auto_aug import rand_augment, trivial_augment

    get = {
        "randaugment": rand_augment.get_rand_augment_suite,
        "trivialaugment": trivial_augment.get_trivial_augment_wide_suite,
    }[policy]
    return get(use_shape=True, max_translate_rel=MAX_TRANSLATE[policy])


def apply(images, args, only: str | None = None):
    """`args.augment`'s policy on a batch of uint8 HWC `images` of `args.image_size` square (training only);
    `only`: one operation of the suite, alone (tests/test_augment.py shows each one applied)."""
    args.applied.append(args.augment)
    if not args.training or args.augment == "none":
        return images
    from nvidia.dali.auto_aug import auto_augment, rand_augment, trivial_augment

    shape = (args.image_size, args.image_size)
    options = {"shape": shape, "max_translate_rel": MAX_TRANSLATE[args.augment]}
    n, m = args.randaugment
    with _without_dalis_own_deprecation():
        if only:  # DALI refuses a `shape` that no operation left uses: only the translations take it
            ops, kwargs = (
                [op for op in suite(args.augment) if op.name == only],
                {"shape": shape} if "translate" in only else {},
            )
            if args.augment == "trivialaugment":
                return trivial_augment.apply_trivial_augment(ops, images, MAGNITUDE_BINS, **kwargs)
            return rand_augment.apply_rand_augment(ops, images, n, m, MAGNITUDE_BINS, **kwargs)
        if args.augment == "autoaugment":
            return auto_augment.auto_augment_image_net(images, **options)
        if args.augment == "trivialaugment":
            return trivial_augment.trivial_augment_wide(images, **options)
        return rand_augment.rand_augment(images, n=n, m=m, **options)


@contextlib.contextmanager
def _without_dalis_own_deprecation():
    """DALI 2.4's auto_aug calls its own deprecated aliases (fn.experimental.equalize and .filter) and forces
    their warnings out (simplefilter("default") inside catch_warnings) at every build: lines on every rank's
    stderr that no user can act on. Only those warnings are dropped."""
    shown = warnings.showwarning

    def show(message, category, *args, **kwargs):
        if not (category is DeprecationWarning and "`nvidia.dali.fn.experimental." in str(message)):
            shown(message, category, *args, **kwargs)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def check_applied(args, pipeline: str) -> None:
    """A training pipeline given --augment must have called `args.auto_augment` (found at its build)."""
    from dali_launch.trainer.errors import UsageError

    if args.training and args.augment != "none" and not args.applied:
        raise UsageError(
            f"--augment {args.augment}: --pipeline {pipeline} never calls args.auto_augment(images); call it on its "
            f"uint8 HWC training crops, or use --augment none"
        )


def phrase(config) -> str:
    """The rank line's words for --augment (a DataConfig), after the DALI settings."""
    if config.augment == "none":
        return ""
    if config.augment == "randaugment":
        n, m = config.randaugment_nm()
        return f", randaugment {n} ops at magnitude {m}"
    return f", {config.augment}"
