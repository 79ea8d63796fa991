"""The evaluator interface shared by every downstream protocol.

An evaluator is built from an :class:`Embedder` (a ``predict_fn`` plus the labelled splits it is applied
to, and optionally the functions for a pair's second input and for per-layer features) and its own
options; ``run(variables)`` yields ``(name, value)`` pairs, where ``value`` is a float or an
:class:`~repr_jax.eval.stats.Estimate` carrying a bootstrap interval. The functions are un-jitted and
supplied by the caller (the training loop, ``repr-jax eval``, a notebook); the embedder jits each once
and pads the last batch so every batch has one shape (one compilation), and caches features so
evaluators that share it share one feature pass. With ``cache_dir`` it also keeps the features of
in-memory inputs on disk (one ``.npz`` per input content and view), so a later evaluation of the
same variables — another evaluator, another set — does not encode them again. With ``pad_id``
(token-id inputs) texts are embedded shortest first and each batch is cut to its longest text
(rounded up to :func:`bucket_width`): a corpus of short texts costs its tokens, not its padding.
"""

from __future__ import annotations

import abc
import hashlib
import io
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import config

PredictFn = Callable[[Any, jax.Array], Any]  # (variables, x_BxS) -> embedding_BxE (or a tuple)


BATCH_ELEMENTS = 1 << 23  # input values in one feature-pass batch (32 MiB of float32)
TOKEN_BUCKET = 16  # a token index's tiles are a multiple of this many tokens wide
SPARSE = "_sparse"  # the cache key's (and file name's) mark of features kept as scipy CSR


def bucket_width(n: int) -> int:
    """The width a batch whose longest text has ``n`` tokens is cut to: the smallest of 4, 6, 8,
    12, 16, 24, ... (powers of two and 1.5 times them) that holds it, so a batch carries at most
    half again its tokens in padding and T tokens take ``O(log T)`` compiled widths.

    >>> [bucket_width(n) for n in (1, 5, 7, 9, 13, 17, 100, 256, 300)]
    [4, 6, 8, 12, 16, 24, 128, 256, 384]
    """
    if n <= 4:
        return 4
    power = 1 << (n - 1).bit_length()  # the power of two at or above n
    return power * 3 // 4 if power * 3 // 4 >= n else power


def trim_padding(ids: np.ndarray, pad_id: int) -> np.ndarray:
    """``ids [B, T]`` without the trailing columns that are padding in every row, kept to
    :func:`bucket_width` of the longest row (few compiled shapes); models mask padding, so their
    outputs are the same. Time ``O(B T)``.

    >>> trim_padding(np.asarray([[5, 0] + [0] * 30]), 0).shape
    (1, 4)
    """
    used = np.flatnonzero((ids != pad_id).any(axis=0))
    width = bucket_width(int(used[-1]) + 1 if len(used) else 1)
    return ids[:, :width] if width < ids.shape[1] else ids


def _streamed(x) -> bool:
    """A streamed split's column (:class:`repr_jax.data.source.Column`): indexing reads rows from
    disk and ``x.chunks(n)`` reads them ahead, so it is never converted whole."""
    return callable(getattr(x, "chunks", None))


class Embedder:
    """Embeds inputs with ``predict_fn`` (``which="x"``: the representation), ``query_fn`` and
    ``pos_fn`` (``"query"``/``"pos"``: a pair's first and second input in the space where pairs are
    compared, e.g. a dual encoder's two projections; default ``predict_fn``) or ``layers_fn``
    (``"layers"``: a tuple of ``[B, D_l]``), caching results per variables. ``score_fn``
    (``(variables, q_ids, d_ids) -> [B]``) is a model that scores a query with a document (a
    cross-encoder): what reranking uses; ``token_fns`` (``{"query", "doc"}: (variables, ids) ->
    (vectors [B, T, d], mask [B, T])``) a vector per token: what late-interaction search uses.
    ``reconstruct_fn`` (``which="reconstruct"``: ``(variables, x) -> x_hat`` shaped like ``x``) a
    model that reconstructs its inputs (a sparse autoencoder): what the ``sae`` evaluator reads.

    ``splits`` maps split names to ``{"x", "label", ...}`` arrays (or streamed splits, whose rows are
    read chunk by chunk); ``embedder(variables)`` gives
    ``{split: (features [N, E], labels [N])}``. ``eval_sets`` are extra evaluation sets
    (:mod:`repr_jax.data.eval_sets`) that evaluators pick by ``kind``. ``scratch_dir``: where
    evaluators keep temporary files (late interaction's token index; default the system's
    temporary folder), so that a killed run's are removed by the next (:mod:`repr_jax.files`).
    ``precision`` (``"float32"``, ``"bfloat16"``, ``"auto"``: :func:`repr_jax.encoders.precision.
    resolve`): bfloat16 traces each function under :func:`repr_jax.encoders.precision.mixed`
    (the text transformer's products: bfloat16 inputs, float32 results).
    """

    def __init__(self, predict_fn: PredictFn, splits: dict[str, dict[str, np.ndarray]], *,
                 batch_size: int = 1024, query_fn: PredictFn | None = None,
                 pos_fn: PredictFn | None = None, layers_fn: PredictFn | None = None,
                 eval_sets: Sequence[Any] = (), cache_dir: str | Path | None = None,
                 progress: str = "", pad_id: int | None = None,
                 score_fn: Callable | None = None, token_fns: dict | None = None,
                 scratch_dir: str | Path | None = None,
                 reconstruct_fn: PredictFn | None = None, precision: str = "float32"):
        from repr_jax.encoders import precision as precision_lib
        self.splits = splits
        # "bfloat16": each function is traced under precision.mixed() (the text transformer's
        # products take bfloat16 inputs, float32 results); "auto" where the CPU has bf16 dots
        self.precision = precision_lib.resolve(precision)
        self.score_fn = score_fn  # (variables, q_ids, d_ids) -> [B]: a model that scores pairs
        self.token_fns = token_fns  # {"query"|"doc": (variables, ids) -> (vectors, mask)}
        self.pad_id = pad_id  # token ids: the padding value whose trailing columns are cut off
        self.progress = progress  # a progress bar's label for each feature pass ("": none)
        # Features on disk belong to one variables object (the first embedded): a checkpoint's.
        self.cache_dir, self._disk_owner = Path(cache_dir) if cache_dir else None, None
        # an evaluator's temporary files (a token index): under the run folder; None: $TMPDIR
        self.scratch_dir = Path(scratch_dir) if scratch_dir else None
        self.batch_size = batch_size
        self.eval_sets = tuple(eval_sets)
        self._fns = {"x": predict_fn, "query": query_fn or predict_fn,
                     "pos": pos_fn or predict_fn, "layers": layers_fn,
                     "reconstruct": reconstruct_fn}
        self._jitted: dict[str, Callable] = {}
        self._variables: Any = None
        self._cache: dict[tuple[int, str], Any] = {}

    pairs_ok = True  # the "query"/"pos" functions apply (not for per-layer views)

    @property
    def has_layers(self) -> bool:
        return self._fns["layers"] is not None

    @property
    def has_reconstruction(self) -> bool:
        return self._fns["reconstruct"] is not None

    def function(self, which: str) -> PredictFn | None:
        """The un-jitted function of ``which`` (``x``, ``query``, ``pos``, ``layers``,
        ``reconstruct``): what an evaluator composes into another model (a spliced SAE)."""
        return self._fns[which]

    def sets(self, kind: str) -> list[Any]:
        return [s for s in self.eval_sets if s.kind == kind]

    def _trims(self, x) -> bool:
        return (self.pad_id is not None and len(x.shape) == 2
                and np.issubdtype(x.dtype, np.integer))

    def _trimmed(self, chunk: np.ndarray) -> np.ndarray:
        return trim_padding(chunk, self.pad_id)

    def _batches(self, variables: Any, x: np.ndarray, which: str,
                 rows: list[np.ndarray] | None = None):
        if self._fns[which] is None:
            raise ValueError(f"this embedder has no {which!r} function")
        if which not in self._jitted:
            self._jitted[which] = jax.jit(self._fns[which] if self.precision == "float32" else
                                          _under_mixed(self._fns[which]))
        bs = self.batch_for(x)
        chunks = (x.chunks(bs) if _streamed(x) else
                  (x[start:start + bs] for start in range(0, len(x), bs)) if rows is None else
                  (x[r] for r in rows))
        if self._trims(x):
            chunks = map(self._trimmed, chunks)
        if self.progress:
            from tqdm.auto import tqdm
            chunks = tqdm(chunks, total=-(-len(x) // bs), desc=f"{self.progress}: {which}",
                          unit="batch", leave=False, dynamic_ncols=True)
        trims = self._trims(x)
        for chunk in chunks:
            # Every batch has one shape: one compilation for all inputs. Token ids already
            # take a few widths; their last, short batch is padded to a power of two rows (at
            # most log2(bs) more shapes) rather than to bs rows of the longest texts.
            rows_to = min(bs, max(8, 1 << (len(chunk) - 1).bit_length())) if trims else bs
            pad = rows_to - len(chunk)
            if pad:
                chunk = np.concatenate([chunk, np.zeros((pad,) + chunk.shape[1:], chunk.dtype)])
            out = self._jitted[which](variables, jnp.asarray(chunk))
            yield jax.tree.map(lambda o, keep=len(chunk) - pad: o[:keep], out)

    def batch_for(self, x) -> int:
        """The feature pass's batch: ``batch_size``, halved until a batch holds at most
        ``BATCH_ELEMENTS`` input values (256 images of 224 px would be 154 MB of input and
        gigabytes of activations; 32 x 32 images keep 256)."""
        per_example = max(1, int(np.prod(x.shape[1:])))
        bs = self.batch_size
        while bs > 1 and bs * per_example > BATCH_ELEMENTS:
            bs //= 2
        return bs

    def embed(self, variables: Any, x: np.ndarray, which: str = "x", *,
              sparse: bool = False) -> Any:
        """Features of ``x`` (``[N, E]`` float32, or a tuple of them for ``"layers"``).
        ``sparse``: as a scipy CSR float32 matrix, each batch made sparse on the host as it
        comes (a sparse encoder's ``[N, V]`` term weights, mostly zero: memory ``O(nnz)`` plus
        one batch, never the dense ``N x V``)."""
        if variables is not self._variables:
            self._variables, self._cache = variables, {}
        if sparse and which == "layers":
            raise ValueError("per-layer features are dense; sparse=True is for x, query, pos")
        key = (id(x), which + SPARSE * sparse)
        if key not in self._cache:
            path = self._disk_path(variables, x, which + SPARSE * sparse)
            features = _read_features(path) if path is not None else None
            if features is None:
                x_in = x if _streamed(x) else np.asarray(x)
                order = _by_length(x_in, self.pad_id) if self._trims(x_in) else None
                bs = self.batch_for(x_in)  # each batch's rows in file order: slices of a memmap
                rows = None if order is None else [np.sort(order[s:s + bs])
                                                   for s in range(0, len(order), bs)]
                batches = self._batches(variables, x_in, which, rows)
                outs = ([_csr(o) for o in batches] if sparse else list(batches))
                if not outs:
                    raise ValueError("nothing to embed: an empty input")
                features = (_stack_csr(outs) if sparse else jax.tree.map(
                    lambda *o: jnp.concatenate(o).reshape(len(x), -1).astype(jnp.float32),
                    *outs))
                if rows is not None:  # batches came shortest first: back to the input's order
                    back = np.argsort(np.concatenate(rows))
                    features = (features[back] if sparse else
                                jax.tree.map(lambda f: f[back], features))
                if path is not None:
                    _write_features(path, features)
            self._cache[key] = (features, x)
        return self._cache[key][0]

    def _disk_path(self, variables: Any, x, which: str) -> Path | None:
        """Where ``x``'s ``which`` features of ``variables`` are kept: named by a digest of the
        input's content (streamed inputs are not kept)."""
        if self.cache_dir is None or _streamed(x):
            return None
        if self._disk_owner is None:
            self._disk_owner = variables
        if variables is not self._disk_owner:
            return None
        x = np.ascontiguousarray(np.asarray(x))
        digest = hashlib.blake2b(x.view(np.uint8).reshape(-1), digest_size=16)
        digest.update(f"{x.dtype}{x.shape}{self.batch_size}".encode())
        if self.precision != "float32":  # bfloat16 features are not float32's (float32: as was)
            digest.update(self.precision.encode())
        return self.cache_dir / f"{which}-{digest.hexdigest()}.npz"

    def __call__(self, variables: Any) -> dict[str, tuple[jax.Array, jax.Array]]:
        """``{split: (features [N, E], labels [N])}``."""
        return {name: (self.embed(variables, s["x"]), jnp.asarray(s["label"]))
                for name, s in self.splits.items()}

    def view(self, transform: Callable[[Any], jax.Array], *, which: str = "x") -> "EmbedderView":
        """An embedder whose features are ``transform(features)``: one layer (``which="layers"``,
        ``transform=lambda t: t[i]``) or an embedding prefix (``lambda f: f[:, :d]``)."""
        return EmbedderView(self, transform, which)


def _under_mixed(fn: Callable) -> Callable:
    """``fn`` traced under :func:`repr_jax.encoders.precision.mixed` (entered inside the jitted
    function: a jit cache does not key on the policy)."""
    from repr_jax.encoders import precision as precision_lib

    def mixed_fn(*args):
        with precision_lib.mixed():
            return fn(*args)
    return mixed_fn


def _by_length(x: np.ndarray, pad_id: int) -> np.ndarray | None:
    """Row indices of in-memory token ids ``x`` [N, T] shortest first (a text's length: its
    last column that is not padding); None for a streamed input, read in its own order. Time
    ``O(N T + N log N)``, memory ``O(N)`` beside one 65,536-row slice."""
    if _streamed(x):
        return None
    lengths = np.zeros(len(x), np.int64)
    for start in range(0, len(x), 65536):  # a memory-mapped corpus is read in slices
        block = np.asarray(x[start:start + 65536]) != pad_id
        lengths[start:start + len(block)] = np.where(
            block.any(axis=1), x.shape[1] - np.argmax(block[:, ::-1], axis=1), 0)
    return np.argsort(lengths, kind="stable")


def _csr(batch_BxV: Any):
    """One batch of features as a scipy CSR float32 matrix (its zeros dropped)."""
    import scipy.sparse as sp
    x = np.asarray(jax.device_get(batch_BxV), np.float32)
    return sp.csr_matrix(x.reshape(len(x), -1))


def _stack_csr(blocks: Sequence[Any]):
    import scipy.sparse as sp
    return sp.vstack(blocks, format="csr", dtype=np.float32)


def _read_features(path: Path) -> Any:
    """Features kept by :meth:`Embedder.embed` (an array, or a tuple for ``"layers"``); None when
    absent, and when damaged or no longer what was written (checked against the digest recorded
    with them; a warning names the file and they are computed again)."""
    from repr_jax import files
    data, why = files.verified(path)
    try:
        if data is None:
            raise ValueError(why)
        if path.name.split("-")[0].endswith(SPARSE):
            import scipy.sparse as sp
            return sp.load_npz(io.BytesIO(data)).tocsr()
        with np.load(io.BytesIO(data)) as z:
            arrays = [jnp.asarray(z[f"f{i}"]) for i in range(len(z.files))]
    except (OSError, ValueError, KeyError, EOFError) as e:
        if str(e):  # absent: nothing to say
            warnings.warn(f"{path}: cached features not used ({e}); encoding again",
                          stacklevel=3)
        return None
    return arrays[0] if path.name.split("-")[0] != "layers" else tuple(arrays)


def _write_features(path: Path, features: Any) -> None:
    from repr_jax import files
    buffer = io.BytesIO()
    if path.name.split("-")[0].endswith(SPARSE):
        import scipy.sparse as sp
        sp.save_npz(buffer, features, compressed=False)
    else:
        arrays = features if isinstance(features, tuple) else (features,)
        np.savez(buffer, **{f"f{i}": np.asarray(a) for i, a in enumerate(arrays)})
    files.write_verified(path, buffer.getvalue())  # atomic, with the digest it is checked by


class EmbedderView(Embedder):
    """Features derived from a parent embedder's (shares its cache and feature pass)."""

    def __init__(self, parent: Embedder, transform: Callable[[Any], jax.Array], which: str):
        self.parent, self.transform, self.which = parent, transform, which
        self.splits, self.batch_size = parent.splits, parent.batch_size
        self.progress = parent.progress
        self.eval_sets, self._fns = parent.eval_sets, parent._fns
        self.pairs_ok = which == "x"

    def embed(self, variables: Any, x: np.ndarray, which: str = "x", *,
              sparse: bool = False) -> Any:
        if sparse:
            raise ValueError(f"a {self.which!r} view's features are dense (sparse=True is the "
                             f"whole representation's)")
        if which != "x" and not self.pairs_ok:
            raise ValueError(f"a {self.which!r} view cannot embed {which!r} inputs")
        return self.transform(self.parent.embed(variables, x, self.which if which == "x" else which))


@config
class NoOptions:
    """The section of an evaluator with nothing to set."""


class Evaluator(abc.ABC):
    """Base of every evaluator: ``Evaluator(embedder, **options).run(variables)``. ``options``:
    its config section (``eval.<name>.*``), a ``repr_jax.config.config`` class declared in the
    evaluator's file whose fields are the keyword arguments it takes beside ``bootstrap``."""

    name: str = "evaluator"
    options: type = NoOptions

    def __init__(self, embedder: Embedder):
        self.embedder = embedder

    @abc.abstractmethod
    def run(self, variables: Any) -> Iterator[tuple[str, float]]:
        """Yields ``(metric_name, value)`` pairs, e.g. ``("accuracy", Estimate(0.93, 0.92, 0.94))``."""
