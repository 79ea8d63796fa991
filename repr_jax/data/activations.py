"""An activation store: one layer of a model, a vector per kept token, as a dataset
(``data.name=activations:DIR``). ``repr-jax activations`` writes it
(:mod:`repr_jax.train.activations`); sparse autoencoders train on it.

The format (version 1), a folder holding:

* ``meta.json`` — written last (a folder without it is unfinished): ``format``
  (``"repr_jax.activations"``), ``version`` (1), ``model`` (the run's absolute path, or the
  ``--init-from`` name or path), ``step`` (the run's checkpoint step; None for ``--init-from``),
  ``encoder`` (its family: ``text_transformer``, ``decoder_lm``, ``vit``), ``layer`` (a block
  counted from 0, or ``"embedding"``), ``width`` (D), ``dtype`` (``float32`` or ``bfloat16``),
  ``vectors`` (N), ``examples`` (how many inputs were read), ``data`` (the source: ``pairs:FILE``,
  ``beir:DIR`` or a ``data.name``), ``split`` (a ``data.name`` source's split; None for text
  sources), ``max_len`` (tokens per text; 0 for images), ``tokenizer`` (what turns the texts
  into the ids the positions index; None for images), ``kept`` (which tokens have a vector, in
  words), ``skip_first`` (the first tokens of each text given no vector: 1 by default for a
  decoder LLM, whose first token is an attention sink; absent in stores older than it, 0),
  ``max_norm_ratio``, ``max_norm`` and ``dropped`` (vectors whose norm was above the ratio
  times the median, ``max_norm``, were left out: ``dropped`` of them; 10 for a decoder LLM's
  blocks, else 0 and None: all kept; absent in older stores),
  ``test_rule``, ``created_by`` (``repr_jax <version>``) and ``identity`` (a digest of
  all that decided the bytes: a rerun with other settings is told apart).
* ``vectors.npy`` — ``[N, D]`` in ``np.save`` format (``np.load(path, mmap_mode="r")`` maps
  it), ``float32`` or ``bfloat16`` (``ml_dtypes.bfloat16``; numpy records it as ``V2`` and
  :func:`open_store` views it back as bfloat16). Row ``i`` is the residual stream after block
  ``layer`` at one kept token (or the pooled embedding of one example).
* ``index.npy`` — ``[N, 2]`` int32: row ``i``'s example index and token position. Rows come in
  example order and, within an example, position order. Positions count the model's input
  tokens from 0 (``[CLS]`` is 0 for a BERT; a decoder's instruction tokens count too, though they
  have no vector); a ViT's token 0 is its CLS token when it has one, then the patches row by row;
  ``-1`` for ``layer="embedding"``.
* ``vectors.npy.blake2b``, ``index.npy.blake2b`` — each file's BLAKE2b-256 digest (hex), as
  :func:`repr_jax.files.write_verified` writes them; :func:`open_store` checks both (hashing in
  16 MiB chunks, :func:`repr_jax.files.verified` with ``read=False``) and refuses a file that
  differs, in one line, before any of it is used.

As a dataset (``data.name=activations:DIR``): each example is ``x``, a float32 vector ``[D]``
(bfloat16 widened exactly), and ``label`` 0 (one class: a store has no labels), the keys and
dtypes of the other vector datasets (``latent_classes``). The splits follow a fixed rule by
example, so one text's tokens never straddle two splits: an example whose index is ``0 mod 10``
is test, ``1 mod 10`` validation, the rest train. Nothing is copied or prepared: the vectors
file is memory-mapped and its rows are read by index (the TFDS data-source interface that
:func:`repr_jax.data.load` reads array_record files through), so a store larger than
``data.in_memory_mb`` streams, and the data pipeline shuffles it as any split (an epoch's
permutation of the rows). Cost of opening: time ``O(N D)`` for the digests (once per process
and file version) and memory ``O(N)`` for the split's row map.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
from pathlib import Path
from typing import Any

import numpy as np

from repr_jax import files
from repr_jax.config import DataConfig, config
from repr_jax.data.prepare import Format

PREFIX = "activations:"
FORMAT_NAME, VERSION = "repr_jax.activations", 1
META, VECTORS, INDEX = "meta.json", "vectors.npy", "index.npy"
DTYPES = ("float32", "bfloat16")
TEST_EVERY = 10  # example % 10 == 0: test; == 1: validation; else train
SPLIT_OF_REMAINDER = {0: "test", 1: "validation"}
TEST_RULE = ("by example index: 0 mod 10 is test, 1 mod 10 validation, the rest train")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a store's ``dtype`` name (``bfloat16``: ml_dtypes')."""
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    if name == "float32":
        return np.dtype(np.float32)
    raise ValueError(f"dtype {name!r}; choose from: {', '.join(DTYPES)}")


def folder_of(name: str) -> Path:
    """The folder of ``activations:DIR`` (a one-line ValueError when nothing follows the
    colon)."""
    path = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if not path.strip():
        raise ValueError("data.name=activations: needs a folder after the colon, e.g. "
                         "activations:/data/acts_layer3")
    return Path(path).expanduser()


def is_store(folder: str | Path) -> bool:
    """Whether ``folder`` holds a finished activation store (its ``meta.json`` names the
    format)."""
    try:
        meta = json.loads((Path(folder) / META).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME


def read_meta(folder: str | Path) -> dict[str, Any]:
    """The ``meta.json`` of an activation store; a folder that is not one is a one-line
    ValueError saying what it lacks."""
    folder = Path(folder)
    problem = files.not_readable(folder, folder=True)
    if problem:
        raise ValueError(f"activations:{folder}: {problem}")
    if not (folder / META).is_file():
        raise ValueError(f"activations:{folder} is not an activations folder (no {META}; "
                         f"`repr-jax activations --out {folder}` writes one, and an unfinished "
                         f"one resumes when rerun)")
    meta = files.read_json(folder / META, fix="write the store again with repr-jax activations")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ValueError(f"activations:{folder}: its {META} is not an activation store's "
                         f"(no \"format\": \"{FORMAT_NAME}\")")
    if meta.get("version") != VERSION:
        raise ValueError(f"activations:{folder}: format version {meta.get('version')!r}; this "
                         f"repr_jax reads version {VERSION}: write it again")
    return meta


@functools.lru_cache(maxsize=64)
def _checked(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """Why ``path`` fails its recorded digest ('' when it matches); cached per file version,
    so a process that opens a store twice (training, then evaluation) hashes it once."""
    del size, mtime_ns, inode  # the cache key: another version of the file is hashed again
    return files.verified(path, read=False)[1]


def check_digest(path: str | Path) -> None:
    """A one-line ValueError naming ``path`` when its content differs from the digest recorded
    beside it, or it has none. Time ``O(size)`` (once per file version and process)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: missing from its activation store; write it again with "
                         f"repr-jax activations")
    st = path.stat()
    why = _checked(str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if why:
        raise ValueError(f"{path}: {why}; not used (a tampered or damaged file): write the "
                         f"store again with repr-jax activations")


@dataclasses.dataclass(frozen=True)
class Store:
    """An opened activation store: ``meta``, ``vectors`` ``[N, D]`` and ``index`` ``[N, 2]``
    (read-only memory maps)."""
    folder: Path
    meta: dict[str, Any]
    vectors: np.ndarray
    index: np.ndarray

    def split_rows(self, chunk: int = 1 << 22) -> dict[str, np.ndarray]:
        """``{split: row indices}`` by the fixed rule (:data:`TEST_RULE`). Time ``O(N)``,
        memory ``O(N)``."""
        remainder = np.empty(len(self.index), np.int8)
        for start in range(0, len(self.index), chunk):
            remainder[start:start + chunk] = self.index[start:start + chunk, 0] % TEST_EVERY
        test, validation = remainder == 0, remainder == 1
        return {"train": np.flatnonzero(~(test | validation)),
                "validation": np.flatnonzero(validation), "test": np.flatnonzero(test)}


def open_store(folder: str | Path, *, verify: bool = True) -> Store:
    """The store in ``folder``, its two files checked against their recorded digests
    (``verify``) and their shapes against ``meta.json``: a folder that is not a store, a
    tampered file or a shape that disagrees is a one-line ValueError, and nothing is used."""
    folder = Path(folder)
    meta = read_meta(folder)
    for name in (VECTORS, INDEX):
        if verify:
            check_digest(folder / name)
    dtype = numpy_dtype(meta["dtype"])
    vectors = np.load(folder / VECTORS, mmap_mode="r")
    if vectors.dtype != dtype:
        if vectors.dtype.itemsize != dtype.itemsize or vectors.dtype.kind != "V":
            raise ValueError(f"{folder / VECTORS}: dtype {vectors.dtype}, but {META} says "
                             f"{meta['dtype']}")
        vectors = vectors.view(dtype)  # bfloat16 is saved as the raw 2-byte type V2
    index = np.load(folder / INDEX, mmap_mode="r")
    n, d = int(meta["vectors"]), int(meta["width"])
    if vectors.shape != (n, d) or index.shape != (n, 2) or index.dtype != np.int32:
        raise ValueError(f"activations:{folder}: vectors {vectors.shape} and index "
                         f"{index.shape} {index.dtype} disagree with {META} ({n} vectors of "
                         f"width {d})")
    return Store(folder, meta, vectors, index)


# --------------------------------------------------------------------------------------------------
# As a dataset: data.name=activations:DIR
# --------------------------------------------------------------------------------------------------

@config
class ActivationsData(DataConfig):
    """``data.name=activations:DIR``: a store written by ``repr-jax activations``; each example
    a float32 vector ``x [D]`` (no views: vectors are not augmented)."""


class _Rows:
    """One split's rows of a store with the TFDS data-source interface
    (``len``, ``__getitems__``): what :class:`repr_jax.data.source.SourceSplit` reads."""

    def __init__(self, vectors: np.ndarray, rows: np.ndarray):
        self.vectors, self.rows = vectors, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitems__(self, idx) -> list[dict[str, Any]]:
        rows = self.rows[np.asarray(idx, np.int64)]
        order = np.argsort(rows, kind="stable")  # the memory map read in file order
        block = np.empty((len(rows), self.vectors.shape[1]), np.float32)
        block[order] = self.vectors[rows[order]]
        return [{"x": v, "label": 0} for v in block]

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]


class StoreBuilder:
    """What :func:`repr_jax.data.load` reads a prepared dataset through (``info`` and
    ``as_data_source``), over an opened :class:`Store`: nothing is copied."""

    name = "activations"

    def __init__(self, store: Store):
        self.store, self.data_dir = store, str(store.folder)
        self._rows = store.split_rows()
        for split, rows in self._rows.items():
            if split != "validation" and not len(rows):
                raise ValueError(
                    f"activations:{store.folder}: no vectors for its {split} split (vectors of "
                    f"{store.meta['examples']} example(s); {TEST_RULE}): write one from at "
                    f"least 3 examples")
        splits = {s: types.SimpleNamespace(num_examples=len(r), shard_lengths=[len(r)],
                                           filenames=[VECTORS])
                  for s, r in self._rows.items() if len(r)}
        self.info = types.SimpleNamespace(
            supervised_keys=("x", "label"), splits=splits, metadata={},
            features={"label": types.SimpleNamespace(num_classes=1)})

    def as_data_source(self, split: str, decoders=None) -> _Rows:
        del decoders  # nothing is encoded
        return _Rows(self.store.vectors, self._rows[split])


def prepare(name: str, data_dir: str) -> StoreBuilder:
    """The reader of ``activations:DIR`` (nothing to prepare: ``data_dir`` is not used); a
    folder that is not a store, or a file that fails its digest, is a one-line ValueError."""
    del data_dir
    return StoreBuilder(open_store(folder_of(name)))


FORMAT = Format(ActivationsData, prepare, path="DIR")


def store_files(folder: str | Path) -> list[Path]:
    """The files of a store (what a command that reads one must never write over)."""
    folder = Path(folder)
    return [folder / n for n in (META, VECTORS, INDEX, VECTORS + ".blake2b", INDEX + ".blake2b")]
