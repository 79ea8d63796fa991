"""Datasets, and deterministic step-indexed global batches.

``load(name, ...)`` prepares (once) a TFDS dataset — built in, or a user's own from a data dir — and
gives a :class:`Dataset` of splits: numpy arrays, or, for a split larger than ``in_memory_mb``, a
:class:`~repr_jax.data.source.SourceSplit` read by index from its array_record files.
:class:`BatchStream` turns a split into batches that are a pure function of ``(seed, step)``: epoch
``e`` visits the examples in the order ``default_rng([seed, e]).permutation(n)``, and the global
batch at ``step`` is the consecutive slice ``[step * B, (step + 1) * B)`` of that endless stream. A
resumed run therefore sees exactly the batches the uninterrupted run would have, and each process of
a multi-host run reads only its rows.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import numpy as np

from repr_jax import files
from repr_jax.config import ArrayData, config
from repr_jax.data.prepare import default_data_dir, no_gcs_metadata, prepared
from repr_jax.data.source import SourceSplit, subset, take
from repr_jax.data.tokenizer import SIDE_FIELDS, Sides, TextData, make_tokenizer

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Splits of a labelled dataset.

    ``splits[name]`` maps feature names to arrays with a leading example axis: ``x`` (inputs: float
    arrays, or int32 token ids for text), ``label`` (int classes) and, for paired datasets, ``x_pos``
    (a positive partner of each ``x``). A split too large to hold is a
    :class:`~repr_jax.data.source.SourceSplit`, the same mapping read by index from disk.
    ``vocab`` lists the tokens of a text dataset (id = index).
    """
    name: str
    splits: dict[str, dict[str, np.ndarray]]
    num_classes: int
    vocab: tuple[str, ...] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One example's ``x`` shape; token ids: the longest of its queries (``x``) and documents
        (``x_pos``), which one encoder may read both of."""
        train = self.splits["train"]
        shape = tuple(train["x"].shape[1:])
        if self.vocab is not None and "x_pos" in train and len(shape) == 1:
            shape = (max(shape[0], train["x_pos"].shape[1]),)
        return shape

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v['label'])}" for k, v in self.splits.items())
        return (f"Dataset({self.name!r}, {sizes}, input_shape={self.input_shape}, "
                f"num_classes={self.num_classes})")


@config
class TfdsData(ArrayData, TextData):
    """A user's TFDS dataset (a name in ``data.data_dir``, or a prepared version folder): arrays
    augmented by ``views``, or text tokenised at load with ``tokenizer`` at ``max_len``."""


def _accepted(source: str, prepare, settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` when ``prepare`` takes each of them; else a one-line error naming the ones
    it takes (a library caller of :func:`load`; the config's sections never pass others)."""
    takes = [k for k in inspect.signature(prepare).parameters if k not in ("name", "data_dir")]
    wrong = sorted(k for k in settings if k not in takes)
    if wrong:
        raise ValueError(f"{source} takes {', '.join(takes) or 'no settings'}, not "
                         f"{', '.join(wrong)}")
    return settings


def _builder(name: str, data_dir: str, **config_kwargs: Any):
    from repr_jax.data import builders
    from repr_jax.data.formats import format_of
    found = format_of(name)
    if found is not None:
        prefix, fmt = found
        return fmt.prepare(name, data_dir, **_accepted(f"{prefix}{fmt.path}", fmt.prepare,
                                                       config_kwargs))
    if name in builders.BUILDERS:
        cls = builders.BUILDERS[name]
        chosen = None
        if config_kwargs:
            if not cls.BUILDER_CONFIGS:
                raise ValueError(f"dataset {name!r} is fixed; it takes no {sorted(config_kwargs)}")
            config_cls = type(cls.BUILDER_CONFIGS[0])
            try:
                chosen = config_cls(**config_kwargs)
            except TypeError:
                params = [p for p in inspect.signature(config_cls).parameters if p != "kwargs"]
                raise ValueError(f"dataset {name!r} takes {params}, not {sorted(config_kwargs)}"
                                 ) from None
            if chosen.name in {c.name for c in cls.BUILDER_CONFIGS}:
                chosen = chosen.name  # TFDS refuses a custom config named like a predefined one
        return prepared(name, lambda: cls(data_dir=data_dir, config=chosen) if chosen
                        else cls(data_dir=data_dir), data_dir)
    # A user's own dataset: a prepared TFDS directory, or a name inside data_dir.
    import tensorflow_datasets as tfds
    path = Path(name)
    if path.is_dir() and (path / "dataset_info.json").exists():
        try:
            return tfds.builder_from_directory(str(path))
        except Exception as e:  # noqa: BLE001 - a damaged directory: name the file
            raise ValueError(f"{path / 'dataset_info.json'} (or the files it lists) cannot be read "
                             f"as a prepared TFDS dataset ({type(e).__name__}: "
                             f"{files.first_line(e)}); prepare the dataset again") from None
    try:
        with no_gcs_metadata():
            builder = tfds.builder(name, data_dir=data_dir, try_gcs=False)
    except Exception as e:  # noqa: BLE001 - tfds raises several kinds; turn them into one message
        raise ValueError(
            f"unknown dataset {name!r}: not a built-in ({', '.join(builders.BUILDERS)}) and not a "
            f"prepared TFDS dataset in data_dir={data_dir!r} ({type(e).__name__}: "
            f"{files.first_line(e)})") from None
    if not builder.is_prepared():
        raise ValueError(
            f"TFDS dataset {name!r} is not prepared in data_dir={data_dir!r} (nothing is downloaded "
            f"at run time): prepare it on a machine with network access (`tfds build {name} "
            f"--data_dir DIR`), copy DIR here and pass data.data_dir=DIR, or pass data.name=<the "
            f"prepared version directory>")
    return builder


def _tokenize_text(splits, tokenizer: str, sides: Sides) -> tuple[str, ...]:
    """Replaces string features (``x``: queries, ``x_pos``: documents) by token ids, in place."""
    tok = make_tokenizer(tokenizer)
    for arrays in splits.values():
        for key in ("x", "x_pos"):
            if key in arrays and arrays[key].dtype.kind in "OSU":
                texts = [t.decode("utf-8") if isinstance(t, bytes) else str(t)
                         for t in arrays[key]]
                arrays[key] = sides.encode(tok, texts, "query" if key == "x" else "doc")
    return tuple(tok.vocab)


def load(name: str, *, data_dir: str = "", tokenizer: str = "", max_len: int = 0,
         in_memory_mb: float = 1024, negatives: int = 0, scores: bool = False,
         **config_kwargs: Any) -> Dataset:
    """Prepares (first time only) a dataset, and reads its splits into memory or opens them for
    reading by index.

    Args:
      name: a built-in name (``mnist1d``, ``digits``, ``latent_classes``, ``latent_modalities``,
        ``latent_topics``, ``wordnet``), ``imagefolder:DIR``, ``pairs:FILE.jsonl``,
        ``beir:DIR``, the name of a TFDS dataset prepared in ``data_dir``, or the
        path of a prepared TFDS dataset version directory.
      data_dir: the TFDS data dir; default ``$REPR_JAX_DATA_DIR`` or ``~/.cache/repr_jax/tfds``.
      tokenizer: for text features: ``""`` (bytes), ``"minilm"`` or the path of a WordPiece
        ``vocab.txt``.
      max_len: sequence length: a builder setting for generated token data (latent_topics), else the
        length text is tokenized to (default 64).
      in_memory_mb: a split whose arrays would take more than this many MiB is a
        :class:`~repr_jax.data.source.SourceSplit` (read by index, decoded on access); 0 streams
        every split. Text stored as strings (``wordnet``) is tokenised at load, so those splits are
        always read into memory; ``pairs:``/``beir:`` are tokenised at preparation and stream.
      negatives: ``pairs:FILE``: hard negatives kept per example (a ``negatives [K, T]``
        feature; see :mod:`repr_jax.data.text_pairs`).
      scores: ``pairs:FILE``: each line's teacher scores too (a ``scores [1 + K]`` feature).
      **config_kwargs: builder-config values for generated datasets (``num_examples``, ...).
    """
    from repr_jax.data import builders
    from repr_jax.data.formats import format_of
    found = format_of(name)
    pretokenized = found is not None and found[1].text  # tokenised at preparation
    side_settings = {k: config_kwargs.pop(k) for k in SIDE_FIELDS[1:] if k in config_kwargs}
    if pretokenized:
        config_kwargs.update(tokenizer=tokenizer, max_len=max_len, negatives=negatives,
                             **({"scores": True} if scores else {}),
                             **side_settings)
    elif negatives or scores:
        raise ValueError(f"hard negatives come from data.name=pairs:FILE (lines with "
                         f"'negatives', and a teacher's scores); {name!r} has none")
    config_cls = (type(builders.BUILDERS[name].BUILDER_CONFIGS[0])
                  if name in builders.BUILDERS and builders.BUILDERS[name].BUILDER_CONFIGS else None)
    if max_len and config_cls is not None and "max_len" in inspect.signature(config_cls).parameters:
        config_kwargs["max_len"], max_len = max_len, 0
    builder = _builder(name, data_dir or default_data_dir(), **config_kwargs)
    info = builder.info
    input_key, label_key = info.supervised_keys or ("x", "label")
    available = [s for s in SPLITS if s in info.splits]
    if "train" not in available or "test" not in available:
        raise ValueError(f"dataset {name!r} needs 'train' and 'test' splits; it has "
                         f"{sorted(info.splits)}")
    splits = {}
    for s in available:
        split = SourceSplit(builder, s, input_key=input_key, label_key=label_key)
        text = split["x"].dtype.kind in "OSU"
        splits[s] = (split if split.nbytes > in_memory_mb * 2**20 and not text
                     else split.read_all())
    if "validation" not in splits:  # carve a fixed validation split out of train
        train = splits["train"]
        perm = np.random.default_rng(0).permutation(len(train["label"]))
        n_val = max(1, len(perm) // 10)
        splits["validation"] = subset(train, perm[:n_val])
        splits["train"] = subset(train, perm[n_val:])
    num_classes = info.features[label_key].num_classes
    vocab = (info.metadata or {}).get("vocab")
    if pretokenized:
        vocab = make_tokenizer(tokenizer).vocab
    elif splits["train"]["x"].dtype.kind in "OSU":
        vocab = _tokenize_text(splits, tokenizer, Sides.of(max_len, **side_settings))
    return Dataset(name=name, splits=splits, num_classes=int(num_classes),
                   vocab=tuple(vocab) if vocab else None)


MIN_BUCKET = 16
TOKEN_FIELDS = ("x", "x_pos", "negatives")  # token ids of a pair's sides: queries, documents


PACK_FIELDS = ("x", "x_pos")  # the sides a two-tower method's towers read as [B, T]
PACK_STEPS = 8  # packed capacities are multiples of B T / PACK_STEPS


def length_bucketed(batch: dict[str, np.ndarray], pad_id: int, *, pack: bool = False
                    ) -> dict[str, np.ndarray]:
    """``batch`` with each side's token ids (``TOKEN_FIELDS``, padded at the end with
    ``pad_id``) cut to its longest text rounded up to a power of two (at least ``MIN_BUCKET``,
    at most the stored length): the encoders mask padding, so the loss is the same, padding costs
    nothing and a run compiles at most a few shapes. Other fields are untouched.

    ``pack=True`` also gives each ``[B, T]`` side of ``PACK_FIELDS`` whose valid tokens fill at
    most ``(PACK_STEPS - 1) / PACK_STEPS`` of it a ``{key}_pack`` ``[C]`` (int32): the flat
    positions of its valid tokens, then ``B T`` in each unused slot, ``C`` their count rounded up
    to a multiple of ``B T / PACK_STEPS`` (at most ``PACK_STEPS - 1`` capacities per shape, so
    few compile). A ``text_transformer`` given it runs its token-wise work on the ``C`` rows
    (:func:`repr_jax.encoders.text_transformer.packed`). Time ``O(B T)``.
    """
    out = dict(batch)
    for key in TOKEN_FIELDS:
        ids = batch.get(key)
        if ids is None or ids.ndim < 2 or not np.issubdtype(ids.dtype, np.integer):
            continue
        used = np.flatnonzero((ids != pad_id).reshape(-1, ids.shape[-1]).any(axis=0))
        longest = int(used[-1]) + 1 if len(used) else 1
        width = min(ids.shape[-1], max(MIN_BUCKET, 1 << (longest - 1).bit_length()))
        out[key] = ids[..., :width]
        if pack and key in PACK_FIELDS and out[key].ndim == 2:
            positions = np.flatnonzero(out[key].ravel() != pad_id)
            total = out[key].size
            step = -(-total // PACK_STEPS)
            capacity = max(step, -(-len(positions) // step) * step)
            if capacity < total:
                out[f"{key}_pack"] = np.concatenate(
                    [positions, np.full(capacity - len(positions), total)]).astype(np.int32)
    return out


class BatchStream:
    """Global batches as a pure function of ``(seed, step)``, from a split held in memory or read by
    index (:class:`~repr_jax.data.source.SourceSplit`: only the rows of the batch are read).

    >>> s = BatchStream({"x": np.arange(10.0), "label": np.arange(10)}, batch_size=4, seed=0)
    >>> bool((s.batch(3)["x"] == BatchStream(s.arrays, batch_size=4, seed=0).batch(3)["x"]).all())
    True
    """

    def __init__(self, arrays, *, batch_size: int, seed: int, pad_id: int | None = None,
                 pack: bool = False):
        self.arrays = arrays
        self.batch_size = batch_size
        self.seed = seed
        self.pad_id = pad_id  # token-id pairs: batches cut to their longest text (length_buckets)
        self.pack = pack  # and their valid tokens' positions given (data.pack_tokens)
        self.num_examples = len(arrays["label"])
        if batch_size > self.num_examples:
            raise ValueError(f"train.batch_size={batch_size} exceeds the {self.num_examples} "
                             f"training examples")
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) > 2:
                self._perms.pop(min(self._perms))
            self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(
                self.num_examples)
        return self._perms[epoch]

    def indices(self, step: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Dataset indices of rows ``[start, stop)`` of the global batch at ``step``."""
        stop = self.batch_size if stop is None else stop
        pos = step * self.batch_size + np.arange(start, stop)
        epochs, offsets = np.divmod(pos, self.num_examples)
        return np.concatenate([self._perm(int(e))[offsets[epochs == e]] for e in np.unique(epochs)])

    def batch(self, step: int, *, process_index: int = 0, process_count: int = 1
              ) -> dict[str, np.ndarray]:
        """This process's contiguous rows of the global batch at ``step``."""
        per_process = self.batch_size // process_count
        idx = self.indices(step, process_index * per_process, (process_index + 1) * per_process)
        batch = take(self.arrays, idx)
        # Several processes must agree on shapes they do not see: they keep the full length.
        return batch if self.pad_id is None or process_count > 1 else \
            length_bucketed(batch, self.pad_id, pack=self.pack)

    def examples_seen(self, step: int) -> int:
        return step * self.batch_size
