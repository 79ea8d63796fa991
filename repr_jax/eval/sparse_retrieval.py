"""Exact search over learned sparse vectors (SPLADE's term weights) through an inverted index.

Documents' term weights ``w_{d,t} >= 0`` (``[N, V]``, mostly zero) are kept as a CSC matrix,
which is an inverted index: for each term ``t`` its posting list, the ids of the documents
where ``t`` is non-zero (``doc_ids[offsets[t]:offsets[t + 1]]``, ascending) and their weights.
A query ``q`` scores document ``d`` by impact scoring,
``score(d) = sum_{t: q_t > 0} q_t w_{d,t}``, accumulated term at a time over the postings of
the query's terms only (scipy's sparse product, Gustavson's algorithm), and the top ``k`` are
exact: the same ids and scores as scoring every document densely, ties to the lower document
id, and documents the query touches nowhere (score 0) only after every scored one, by id.

Cost of :func:`search` for ``Q`` queries: time ``O(T + ceil(Q / B) N + sum_q c_q + Q k log k)``
for ``T`` the postings touched (the sum, over every query's terms, of the terms' posting
lengths; :attr:`Results.touched`), ``c_q`` the documents query ``q`` scores (``c_q <= T_q``),
``B`` queries a block; memory ``O(N + T_B)``: one dense accumulator of ``N`` per block (not per
query) plus the block's touched postings. Building: time ``O(nnz + V)`` plus scipy's sort of
each chunk, memory ``O(nnz + V)``.

Efficiency rows (:func:`stats`): mean non-zeros of the queries and of the documents, the
index's bytes per document, and FLOPS, the expected number of multiply-adds to score one
query against one document, ``sum_t p_t^(q) p_t^(d)``, ``p_t`` the fraction of queries
(documents) where term ``t`` is non-zero (Paria et al. 2020, "Minimizing FLOPs to learn
efficient sparse representations", eq. 2; Formal et al. 2021, SPLADE, sec. 3; the same sum is
``flops = np.sum(p_d * p_q)`` in naver/splade ``splade/flops.py``, ``p`` from the posting
lengths of a document index and of a query index). Over the same queries and documents it is
exactly ``T / (Q N)``: the postings :func:`search` touches, per query and document.

On disk (:func:`save_index`, :func:`load_index`) an index is a folder of ``meta.json``,
``offsets.npy`` ``[V + 1]``, ``doc_ids.npy`` ``[nnz]`` and ``weights.npy`` ``[nnz]`` float32,
each written atomically with its BLAKE2b digest beside it (:func:`repr_jax.files.write_verified`);
a file that differs from its digest (tampered, truncated) or is missing is a one-line
ValueError naming it, and nothing of the index is used.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from repr_jax import files
from repr_jax.config import config, static
from repr_jax.eval.base import Evaluator
from repr_jax.eval.retrieval import metric_cutoffs, retrieval_tasks, topk_metrics, without
from repr_jax.eval.stats import with_ci

FORMAT, VERSION = "repr_jax.sparse_index", 1
META, OFFSETS, DOC_IDS, WEIGHTS = "meta.json", "offsets.npy", "doc_ids.npy", "weights.npy"
WEIGHT_DTYPE = np.float32


def _index_dtype(nnz: int, n: int) -> type:
    """int32 offsets and ids while they fit (scipy's product then copies nothing), else int64."""
    return np.int32 if max(nnz, n) < 2**31 else np.int64


def _check_weights(values: np.ndarray, what: str) -> None:
    if values.size and not np.isfinite(values).all():
        raise ValueError(f"{what}: term weights must be finite (found NaN or inf)")
    if values.size and values.min() < 0:
        raise ValueError(f"{what}: term weights must be non-negative (SPLADE's are); found "
                         f"{values.min():g}")


def as_csr(weights: Any, vocab: int | None = None, *, what: str = "weights",
           chunk: int = 4096):
    """``[R, V]`` term weights as a canonical float32 CSR matrix (sorted term ids, no zeros).

    ``weights``: a dense ``[R, V]`` array (converted ``chunk`` rows at a time, so a float32
    block of ``chunk x V`` is the most held at once besides the result), a scipy.sparse matrix,
    or a list of ``(term_ids, values)`` pairs, one per row (a list is always read as pairs).
    Zero weights are dropped; negative or non-finite weights, a term id outside ``[0, V)`` or a
    term listed twice in one row is a ValueError. Time ``O(R V)`` for a dense array,
    ``O(nnz log nnz_row)`` otherwise."""
    if sp.issparse(weights):
        m = sp.csr_matrix(weights, dtype=WEIGHT_DTYPE, copy=True)
        if vocab is not None and m.shape[1] != vocab:
            raise ValueError(f"{what}: {m.shape[1]} terms, but the index has {vocab}")
        m.sum_duplicates()
    elif hasattr(weights, "__array__") and not isinstance(weights, (list, tuple)):
        x = np.asarray(weights)
        if x.ndim != 2:
            raise ValueError(f"{what}: dense weights must be [rows, vocab]; got shape {x.shape}")
        if vocab is not None and x.shape[1] != vocab:
            raise ValueError(f"{what}: {x.shape[1]} terms, but the index has {vocab}")
        m = sp.vstack([sp.csr_matrix(np.asarray(x[i:i + chunk], WEIGHT_DTYPE))
                       for i in range(0, x.shape[0], chunk)] or
                      [sp.csr_matrix((0, x.shape[1]), dtype=WEIGHT_DTYPE)], format="csr")
    else:
        rows = list(weights)
        ids = [np.asarray(i, np.int64).reshape(-1) for i, _ in rows]
        vals = [np.asarray(v, WEIGHT_DTYPE).reshape(-1) for _, v in rows]
        for r, (i, v) in enumerate(zip(ids, vals)):
            if i.shape != v.shape:
                raise ValueError(f"{what}: row {r} has {i.size} term ids but {v.size} values")
        top = max((int(i.max()) for i in ids if i.size), default=-1)
        if vocab is None:
            vocab = top + 1
        if top >= vocab or any(i.size and i.min() < 0 for i in ids):
            raise ValueError(f"{what}: term ids must lie in [0, {vocab})")
        indptr = np.concatenate([[0], np.cumsum([i.size for i in ids])]).astype(np.int64)
        flat_i = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        flat_v = np.concatenate(vals) if vals else np.zeros(0, WEIGHT_DTYPE)
        m = sp.csr_matrix((flat_v, flat_i, indptr), shape=(len(rows), vocab))
        m.has_sorted_indices = False
        m.sort_indices()
        row = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
        dup = np.flatnonzero((np.diff(m.indices) == 0) & (np.diff(row) == 0))
        if len(dup):
            raise ValueError(f"{what}: row {row[dup[0]]} lists term {m.indices[dup[0]]} twice")
    _check_weights(m.data, what)
    m.eliminate_zeros()
    m.sort_indices()
    return m


@dataclasses.dataclass(frozen=True)
class SparseIndex:
    """An inverted index of ``num_docs`` documents over ``vocab`` terms: term ``t``'s postings
    are ``doc_ids[offsets[t]:offsets[t + 1]]`` (ascending) with ``weights`` there. ``doc_ids``
    and ``offsets`` are int32 while ``nnz`` and ``num_docs`` fit (else int64), ``weights``
    float32."""
    offsets: np.ndarray
    doc_ids: np.ndarray
    weights: np.ndarray
    num_docs: int

    @property
    def vocab(self) -> int:
        return len(self.offsets) - 1

    @property
    def nnz(self) -> int:
        return len(self.doc_ids)

    def posting_lengths(self) -> np.ndarray:
        """``[V]``: how many documents each term has."""
        return np.diff(self.offsets)

    def nbytes(self) -> int:
        """Bytes of the index's three arrays (offsets, ids, weights)."""
        return self.offsets.nbytes + self.doc_ids.nbytes + self.weights.nbytes

    def csc(self):
        """The index as scipy's CSC ``[N, V]`` (the same arrays, nothing copied)."""
        return sp.csc_matrix((self.weights, self.doc_ids, self.offsets),
                                    shape=(self.num_docs, self.vocab), copy=False)


def build_index(doc_weights: Any, vocab: int | None = None, *, chunk: int = 4096
                ) -> SparseIndex:
    """The inverted index of documents' term weights (any form :func:`as_csr` takes; ``vocab``
    needed only for ``(term_ids, values)`` pairs whose largest id is not the last term).
    Time ``O(nnz + V)`` after :func:`as_csr`, memory ``O(nnz + V)``."""
    m = as_csr(doc_weights, vocab, what="documents", chunk=chunk).tocsc()
    m.sort_indices()
    dtype = _index_dtype(m.nnz, m.shape[0])
    return SparseIndex(offsets=m.indptr.astype(dtype), doc_ids=m.indices.astype(dtype),
                       weights=m.data.astype(WEIGHT_DTYPE), num_docs=m.shape[0])


@dataclasses.dataclass(frozen=True)
class Results:
    """``ids`` and ``scores`` ``[Q, min(k, N)]`` (int64, float32), best first; ``touched``
    ``[Q]``: the postings each query's scoring read (the sum of its terms' posting lengths)."""
    ids: np.ndarray
    scores: np.ndarray
    touched: np.ndarray


def _top_row(cand_ids: np.ndarray, cand_scores: np.ndarray, k: int, n: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of one query's scored documents, ties to the lower id, padded with the
    lowest-id unscored documents (score 0). Time ``O(c + k log k)`` for ``c`` candidates."""
    c = len(cand_ids)
    if c > k:
        kth = np.partition(cand_scores, c - k)[c - k]  # the k-th largest score
        above = cand_scores > kth
        tied = np.flatnonzero(cand_scores == kth)
        tied = tied[np.argsort(cand_ids[tied], kind="stable")[:k - int(above.sum())]]
        keep = np.concatenate([np.flatnonzero(above), tied])
        cand_ids, cand_scores = cand_ids[keep], cand_scores[keep]
    order = np.lexsort((cand_ids, -cand_scores))
    ids, scores = cand_ids[order].astype(np.int64), cand_scores[order]
    need = k - len(ids)
    if need > 0:  # the lowest ids not scored: among the first need + c ids
        fill = np.setdiff1d(np.arange(min(n, need + len(ids))), ids, assume_unique=True)[:need]
        ids = np.concatenate([ids, fill])
        scores = np.concatenate([scores, np.zeros(len(fill), scores.dtype)])
    return ids, scores


def search(index: SparseIndex, queries: Any, k: int, *, block: int = 1024) -> Results:
    """Exact top-``k`` documents of each query by impact scoring (see the module docstring):
    ``ids``, ``scores`` ``[Q, min(k, N)]``, ties to the lower document id, unscored documents
    (score 0) after every scored one, by id; a query with no terms gets documents 0, 1, ...
    with score 0. ``queries``: any form :func:`as_csr` takes, over the index's vocabulary.
    Scores are float32 sums in the query's term order (a dense float32 product may differ in
    the last bit; with weights exact in float32, such as multiples of a power of two, they are
    equal). Time ``O(T + ceil(Q / block) N + sum_q c_q + Q k log k)``, memory
    ``O(N + T_block)`` (one accumulator of ``N`` per ``block`` queries).

    >>> index = build_index(np.asarray([[0, 2, 1], [3, 0, 0], [0, 1, 0]], np.float32))
    >>> out = search(index, np.asarray([[1, 2, 0], [0, 0, 0]], np.float32), 3)
    >>> out.ids.tolist(), out.scores.tolist(), out.touched.tolist()
    ([[0, 1, 2], [0, 1, 2]], [[4.0, 3.0, 2.0], [0.0, 0.0, 0.0]], [3, 0])
    """
    if k < 1:
        raise ValueError(f"k={k}: search needs k >= 1")
    q = as_csr(queries, index.vocab, what="queries")
    dtype = index.offsets.dtype
    q = sp.csr_matrix((q.data, q.indices.astype(dtype), q.indptr.astype(dtype)),
                             shape=q.shape, copy=False)
    postings_VxN = index.csc().T  # CSR [V, N]: row t is term t's posting list
    lengths = index.posting_lengths()
    width = min(k, index.num_docs)
    ids = np.zeros((q.shape[0], width), np.int64)
    scores = np.zeros((q.shape[0], width), np.float32)
    touched = np.add.reduceat(np.concatenate([lengths[q.indices], [0]]).astype(np.int64),
                              q.indptr[:-1]) if q.shape[0] else np.zeros(0, np.int64)
    touched[np.diff(q.indptr) == 0] = 0  # reduceat reads one element for an empty row
    for start in range(0, q.shape[0], block):
        scored_BxN = (q[start:start + block] @ postings_VxN).tocsr()
        for r in range(scored_BxN.shape[0]):
            lo, hi = scored_BxN.indptr[r], scored_BxN.indptr[r + 1]
            ids[start + r], scores[start + r] = _top_row(
                scored_BxN.indices[lo:hi], scored_BxN.data[lo:hi], width, index.num_docs)
    return Results(ids=ids, scores=scores, touched=touched)


def _row_nnz(weights: Any, vocab: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``([R] non-zeros per row, [V] rows where each term is non-zero)``."""
    if isinstance(weights, SparseIndex):
        return (np.bincount(weights.doc_ids, minlength=weights.num_docs),
                weights.posting_lengths())
    m = as_csr(weights, vocab)
    return np.diff(m.indptr), np.bincount(m.indices, minlength=m.shape[1])


def flops(query_weights: Any, doc_weights: Any, vocab: int | None = None) -> float:
    """The SPLADE paper's FLOPS: ``sum_t p_t^(q) p_t^(d)``, ``p_t`` the fraction of queries
    (documents) where term ``t`` is non-zero; the expected multiply-adds of one query-document
    score (module docstring). Either argument may be a :class:`SparseIndex` or any form
    :func:`as_csr` takes. Time ``O(nnz + V)``."""
    if vocab is None and isinstance(doc_weights, SparseIndex):
        vocab = doc_weights.vocab
    q_rows, q_terms = _row_nnz(query_weights, vocab)
    d_rows, d_terms = _row_nnz(doc_weights, vocab)
    if len(q_terms) != len(d_terms):
        raise ValueError(f"queries over {len(q_terms)} terms, documents over {len(d_terms)}")
    if not len(q_rows) or not len(d_rows):
        raise ValueError("FLOPS needs at least one query and one document")
    p_q, p_d = q_terms / len(q_rows), d_terms / len(d_rows)
    return float(np.sum(p_q * p_d))


def stats(index: SparseIndex, queries: Any) -> dict[str, float]:
    """Efficiency rows of ``queries`` searched in ``index``: ``query_nnz`` and ``doc_nnz``
    (mean non-zero terms), ``bytes_per_doc`` (the index's bytes over ``N``: int32 ids and
    float32 weights, 8 bytes a posting, plus the ``V + 1`` int32 offsets shared; int64 ids and
    offsets past ``2**31`` postings) and ``flops`` (:func:`flops`). Time ``O(nnz + V)``."""
    q_rows, _ = _row_nnz(queries, index.vocab)
    return {"query_nnz": float(q_rows.mean()) if len(q_rows) else 0.0,
            "doc_nnz": index.nnz / max(index.num_docs, 1),
            "bytes_per_doc": index.nbytes() / max(index.num_docs, 1),
            "flops": flops(queries, index)}


# --------------------------------------------------------------------------------------------------
# On disk
# --------------------------------------------------------------------------------------------------

def _npy_bytes(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, x, allow_pickle=False)
    return buf.getvalue()


def save_index(index: SparseIndex, folder: str | Path) -> Path:
    """Writes ``index`` into ``folder``: the three arrays then ``meta.json`` (so a folder
    without it is unfinished), each atomically with its digest. Time ``O(nnz + V)``."""
    folder = Path(folder)
    (folder / META).unlink(missing_ok=True)
    for name, x in ((OFFSETS, index.offsets), (DOC_IDS, index.doc_ids),
                    (WEIGHTS, index.weights)):
        files.write_verified(folder / name, _npy_bytes(x))
    meta = {"format": FORMAT, "version": VERSION, "num_docs": index.num_docs,
            "vocab": index.vocab, "nnz": index.nnz, "index_dtype": str(index.offsets.dtype),
            "weight_dtype": str(index.weights.dtype)}
    files.write_verified(folder / META, json.dumps(meta, indent=1).encode())
    return folder


def read_verified(path: Path) -> bytes:
    """The bytes of an index folder's file, checked against its digest: a missing, unverified or
    differing file is a one-line ValueError naming it. Time ``O(size)``."""
    data, why = files.verified(path)
    if data is None:
        why = why or "missing"
        raise ValueError(f"{path}: {why}; not used (a tampered or damaged file): build the "
                         f"index again")
    return data


def load_index(folder: str | Path) -> SparseIndex:
    """The index :func:`save_index` wrote in ``folder``; a file missing, without its digest or
    differing from it (tampered, truncated), or arrays that disagree with ``meta.json``, is a
    one-line ValueError naming the file, and nothing is used. Time ``O(nnz + V)``."""
    folder = Path(folder)
    try:
        meta = json.loads(read_verified(folder / META))
    except json.JSONDecodeError as e:
        raise ValueError(f"{folder / META}: not JSON ({files.first_line(e)})") from None
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(f"{folder / META}: not a {FORMAT} version {VERSION} index")
    arrays = {}
    for name in (OFFSETS, DOC_IDS, WEIGHTS):
        try:
            arrays[name] = np.load(io.BytesIO(read_verified(folder / name)),
                                   allow_pickle=False)
        except ValueError as e:
            if str(folder / name) in str(e):
                raise
            raise ValueError(f"{folder / name}: not an .npy array ({files.first_line(e)})"
                             ) from None
    offsets, doc_ids, weights = arrays[OFFSETS], arrays[DOC_IDS], arrays[WEIGHTS]
    n, v, nnz = int(meta["num_docs"]), int(meta["vocab"]), int(meta["nnz"])
    for name, x, shape, dtype in ((OFFSETS, offsets, (v + 1,), meta["index_dtype"]),
                                  (DOC_IDS, doc_ids, (nnz,), meta["index_dtype"]),
                                  (WEIGHTS, weights, (nnz,), meta["weight_dtype"])):
        if x.shape != shape or str(x.dtype) != dtype:
            raise ValueError(f"{folder / name}: {x.shape} {x.dtype}, but {META} says "
                             f"{shape} {dtype}")
    if offsets[0] != 0 or offsets[-1] != nnz or (np.diff(offsets) < 0).any() or (
            nnz and (doc_ids.min() < 0 or doc_ids.max() >= n)):
        raise ValueError(f"{folder / OFFSETS}: offsets or document ids out of range for "
                         f"{n} documents")
    return SparseIndex(offsets=offsets, doc_ids=doc_ids, weights=weights, num_docs=n)


def index_files(folder: str | Path) -> list[Path]:
    """The files of a saved index (with their digests)."""
    folder = Path(folder)
    names: Sequence[str] = (META, OFFSETS, DOC_IDS, WEIGHTS)
    return [folder / n for n in names] + [folder / f"{n}.blake2b" for n in names]


# --------------------------------------------------------------------------------------------------
# Evaluator
# --------------------------------------------------------------------------------------------------

@config
class SparseRetrievalOptions:
    """``eval.sparse_retrieval.*``: the options of :class:`SparseRetrieval` (its keyword
    arguments)."""
    metrics: tuple[str, ...] = static(("recall@1", "recall@10", "mrr@10", "ndcg@10"),
                                      doc="metric@k, metric in recall | precision | mrr | ndcg "
                                          "| map")
    max_queries: int = static(2000, ">0", "retrieval over the test pairs: first N pairs")

    def _validate(self):
        metric_cutoffs(self.metrics, option="eval.sparse_retrieval.metrics")


class SparseRetrieval(Evaluator):
    """Exact top-k retrieval through an inverted index of the corpus's term weights (the
    embedder's features: a sparse encoder's ``[N, V]`` non-negative weights, such as SPLADE's)
    on every retrieval task (:func:`repr_jax.eval.retrieval.retrieval_tasks`): each metric with
    a per-query bootstrap interval, then ``query_nnz``, ``doc_nnz``, ``bytes_per_doc`` and
    ``flops`` (:func:`stats`). Features with a negative weight are refused in one line (a dense
    encoder's belong to the ``retrieval`` evaluator).

    Cost: the features come a batch at a time, each made sparse on the host (``O(B V)`` time
    and memory a batch); building ``O(nnz + V)`` time and memory; searching as :func:`search`,
    ``O(T + Q k log k)``; metrics ``O(Q k)``."""

    name = "sparse_retrieval"
    options = SparseRetrievalOptions

    def __init__(self, embedder, *, metrics: Sequence[str] = ("recall@1", "recall@10", "mrr@10",
                                                             "ndcg@10"),
                 max_queries: int = 2000, bootstrap: int = 1000):
        super().__init__(embedder)
        self.metrics, self.max_queries, self.bootstrap = tuple(metrics), max_queries, bootstrap
        self.ks = list(metric_cutoffs(self.metrics, option="eval.sparse_retrieval.metrics"))

    def run(self, variables):
        for prefix, q, c, qrels, exclude in retrieval_tasks(self.embedder, variables,
                                                            max_queries=self.max_queries,
                                                            sparse=True):
            try:
                index = build_index(c)
                q = as_csr(q, index.vocab, what="queries")
            except ValueError as e:
                raise ValueError(f"sparse_retrieval on {prefix or 'the test pairs'}: "
                                 f"{files.first_line(e)}; it needs a sparse encoder's term "
                                 f"weights") from None
            extra = int(exclude is not None)
            idx = search(index, q, max(self.ks) + extra).ids
            if exclude is not None:
                idx = without(idx, exclude)
            per_q = topk_metrics(idx, qrels, self.ks, per_query=True)
            for m in self.metrics:
                yield prefix + m, with_ci(per_q[m], bootstrap=self.bootstrap)
            for name, value in stats(index, q).items():
                yield prefix + name, value
