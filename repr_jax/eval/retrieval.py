"""Exact top-k retrieval in memory-bounded chunks, and ranking metrics in the trec_eval convention.

Conventions (checked against ``pytrec_eval`` in ``tests/test_eval_retrieval.py``):

* a document is relevant when its grade is ``>= 1`` (trec_eval's ``relevance_level=1``);
* ``recall@k`` = relevant in the top ``k`` / all relevant; ``precision@k`` = relevant in the top ``k``
  / ``k``; ``mrr@k`` = 1 / rank of the first relevant document within the top ``k`` (0 if none);
  ``ndcg@k`` uses linear gain (the grade; a grade ``<= 0``, such as TREC's ``-1`` for junk, gains
  nothing), a ``1 / log2(rank + 1)`` discount and the ideal ranking from the qrels (trec_eval's
  ``ndcg_cut``); ``map@k`` sums precision at each relevant rank within the
  top ``k`` and divides by *all* relevant documents (trec_eval's ``map_cut``);
* ties in score are broken by document order: the lower corpus index ranks first (``pytrec_eval``
  breaks ties by descending document id, so name documents accordingly when comparing);
* means are over queries with at least one relevant document.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.backend import cpu_has_bf16_dots
from repr_jax.config import ConfigError, config, static
from repr_jax.eval.base import Evaluator
from repr_jax.eval.stats import with_ci

SIMILARITIES = ("cosine", "dot", "l2")
METRICS = ("recall", "precision", "mrr", "ndcg", "map")


def metric_cutoffs(metrics: Sequence[str] | str, *, option: str) -> tuple[int, ...]:
    """The distinct cut-offs ``k`` (sorted) of ``metric@k`` names, each checked first: the
    metric one of :data:`METRICS`, ``k`` a whole number of at least 1 (the top k documents).
    Anything else is a one-line :class:`ConfigError` (a ValueError) naming ``option`` (the flag
    or config key that gave the names) and the name given. Every place that takes metric names
    (``eval.retrieval.metrics``, ``eval.rerank.metrics``, ``eval.late_interaction.metrics``,
    ``repr-jax compare --metrics``) checks them here, before any work.

    >>> metric_cutoffs(("ndcg@10", "recall@100", "mrr@10"), option="--metrics")
    (10, 100)
    >>> try:
    ...     metric_cutoffs(("ndcg@0",), option="--metrics")
    ... except ValueError as e:
    ...     print(str(e)[:39])
    --metrics: 'ndcg@0': the cut-off k must
    """
    names = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    if not names:
        raise ConfigError(f"{option}: no metric given; use metric@k, metric in "
                          f"{', '.join(METRICS)}")
    ks = set()
    for m in names:
        name, at, k = str(m).partition("@")
        if name not in METRICS or not at:
            raise ConfigError(f"{option}: {m!r} is not metric@k with metric in "
                              f"{', '.join(METRICS)}")
        if not re.fullmatch(r"[0-9]+", k) or int(k) < 1:
            raise ConfigError(f"{option}: {m!r}: the cut-off k must be a whole number of at "
                              f"least 1 (metric@k: the top k documents), got {k or 'nothing'}")
        ks.add(int(k))
    return tuple(sorted(ks))


def normalize_rows(x):
    """``x`` divided by the Euclidean norm of its last axis (floored at ``1e-12``: a zero row stays
    zero): unit rows whose dot products are cosines. Time and memory ``O(N D)``."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


_normalize_jit = jax.jit(normalize_rows)


def similarity_matrix(q_QxD: jax.Array, c_NxD: jax.Array, similarity: str) -> jax.Array:
    """``cosine``, ``dot``, or ``l2`` (negative squared Euclidean distance) scores ``[Q, N]``."""
    if similarity == "cosine":
        return normalize_rows(q_QxD) @ normalize_rows(c_NxD).T
    if similarity == "dot":
        return q_QxD @ c_NxD.T
    if similarity == "l2":
        return (2 * q_QxD @ c_NxD.T - jnp.sum(c_NxD ** 2, -1)[None, :]
                - jnp.sum(q_QxD ** 2, -1)[:, None])
    raise ValueError(f"unknown similarity {similarity!r}; choose from {SIMILARITIES}")


SCAN_DTYPES = ("auto", "bfloat16", "float32")
_BF16_UNIT = 2.0 ** -8  # bfloat16's unit roundoff (8-bit significand, round to nearest even)


def _bound_factor(d: int) -> float:
    """``rho`` with ``|s_bf16 - s| <= rho * |q| |c|`` for a ``d``-dim dot product of
    bfloat16-rounded inputs accumulated in float32, against the float32 rescoring: each input
    rounds by at most ``u`` relative (the products are exact in float32), float32 sums of ``d``
    terms err by at most ``gamma_d`` of the summed magnitudes (once in the scan, once in the
    rescoring), and ``sum |q_i c_i| <= |q| |c|``. 1% slack for the norms' own rounding."""
    u, gamma = _BF16_UNIT, d * 2.0 ** -24 / (1 - d * 2.0 ** -24)
    return 1.01 * (2 * u + u * u + 2 * gamma * (1 + u) ** 2)


@functools.cache
def bfloat16_is_fast() -> bool:
    """Whether the default backend is a CPU with bfloat16 dot-product instructions, where a
    bfloat16 score scan beats a float32 one (``bench/retrieval_vs_faiss.py``;
    :func:`repr_jax.backend.cpu_has_bf16_dots`)."""
    return cpu_has_bf16_dots()


def _scan_scores(q_QxD, c_CxD, similarity: str, low: bool):
    """Scores ``[Q, C]`` of one corpus tile: float32, or from bfloat16-rounded inputs (float32
    sums). Time ``O(Q C D)``."""
    if not low:
        return similarity_matrix(q_QxD, c_CxD, similarity)
    dot = jnp.einsum("qd,cd->qc", q_QxD.astype(jnp.bfloat16), c_CxD.astype(jnp.bfloat16),
                     preferred_element_type=jnp.float32)
    if similarity == "l2":
        return 2 * dot - jnp.sum(c_CxD ** 2, -1)[None, :] - jnp.sum(q_QxD ** 2, -1)[:, None]
    return dot


def _rank_blocks(q_QxD, c_NxD, blocks_QxB, valid_QxB, *, k: int, block: int, similarity: str):
    """The ``k`` best documents in each query's ``blocks`` (in corpus order; entries not ``valid``
    and rows past the corpus score -inf), rescored in float32: ``(scores, indices)``, ties to the
    lower index. Time ``O(Q B block D)``; the rows gathered at once stay under 256 MiB."""
    n, d = c_NxD.shape

    def rank(inputs):
        q_D, blocks_B, valid_B = inputs
        ids = (blocks_B[:, None] * block + jnp.arange(block, dtype=jnp.int32)[None, :]).reshape(-1)
        keep = (ids < n) & jnp.repeat(valid_B, block)
        s = similarity_matrix(q_D[None], c_NxD[jnp.minimum(ids, n - 1)], similarity)[0]
        top_s, pos = jax.lax.top_k(jnp.where(keep, s, -jnp.inf), k)
        return top_s, ids[pos]

    batch = max(1, min(64, (1 << 26) // (blocks_QxB.shape[1] * block * d)))
    return jax.lax.map(rank, (q_QxD, blocks_QxB, valid_QxB), batch_size=batch)


_rank_blocks_jit = jax.jit(_rank_blocks, static_argnames=("k", "block", "similarity"))


@functools.partial(jax.jit, static_argnames=("k", "similarity", "corpus_chunk", "block", "low"))
def _topk_blocks(q_QxD, c_NxD, *, k: int, similarity: str, corpus_chunk: int, block: int,
                 low: bool = False):
    """Exact top-``k`` in two stages (``similarity`` ``dot`` or ``l2``). (1) The corpus is scored
    chunk by chunk (a score tile small enough to stay in cache) and only each ``block`` of
    documents' best score is kept. (2) The ``k`` best blocks per query hold its ``k`` best
    documents (each of those has a block maximum at least the ``k``-th best score), so only their
    documents are rescored and ranked. Blocks are taken in corpus order, so ties go to the lower
    index. Returns ``(scores, indices, proven [Q], bounds [Q, blocks] or None)``.

    With ``low`` the scan scores bfloat16-rounded inputs and each block's maximum is raised by the
    rounding's bound (:func:`_bound_factor`, with the block's largest document norm) to an upper
    bound; ``2k`` blocks are rescored in float32, and a query is ``proven`` when its ``k``-th score
    beats the bound of every block left out (:func:`retrieve` settles the others). Without
    ``low`` every query is proven and no bounds are returned. Time ``O(Q N D + Q kb block D)``,
    memory ``O(Q (corpus_chunk + N / block))``."""
    n, q, d = c_NxD.shape[0], q_QxD.shape[0], c_NxD.shape[1]

    def block_bounds(c_CxD, valid_C):
        """Each block's best score (upper bound with ``low``) against every query: [Q, C / block]."""
        s_QxC = jnp.where(valid_C[None, :], _scan_scores(q_QxD, c_CxD, similarity, low), -jnp.inf)
        m_QxB = s_QxC.reshape(q, -1, block).max(-1)
        if not low:
            return m_QxB
        c_norm_B = jnp.where(valid_C, jnp.linalg.norm(c_CxD, axis=-1), 0).reshape(-1, block).max(-1)
        rho, q_norm_Q = _bound_factor(d), jnp.linalg.norm(q_QxD, axis=-1)
        slack = rho * q_norm_Q[:, None] * c_norm_B[None, :]
        if similarity == "l2":
            slack = 2 * slack + rho * (c_norm_B[None, :] ** 2 + q_norm_Q[:, None] ** 2)
        return m_QxB + slack

    # Whole chunks are read in place (a padded or sliced copy of the corpus cost a third of the
    # scan); the tail, padded to whole blocks, is scored after them.
    full = n // corpus_chunk
    parts = []
    if full:
        _, m = jax.lax.scan(lambda _, i: (None, block_bounds(
            jax.lax.dynamic_slice_in_dim(c_NxD, i * corpus_chunk, corpus_chunk),
            jnp.ones(corpus_chunk, bool))), None, jnp.arange(full))
        parts.append(m.transpose(1, 0, 2).reshape(q, -1))
    tail = n - full * corpus_chunk
    if tail:
        width = -(-tail // block) * block
        c_TxD = jnp.pad(c_NxD[full * corpus_chunk:], ((0, width - tail), (0, 0)))
        parts.append(block_bounds(c_TxD, jnp.arange(width) < tail))
    bounds_QxM = jnp.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    num_blocks = bounds_QxM.shape[1]
    kb = min(2 * k if low else k, num_blocks)
    blocks_QxB = jnp.sort(jax.lax.top_k(bounds_QxM, kb)[1], axis=1)
    top_s, top_i = _rank_blocks(q_QxD, c_NxD, blocks_QxB, jnp.ones_like(blocks_QxB, bool), k=k,
                                block=block, similarity=similarity)
    if not low:
        return top_s, top_i, jnp.ones(q, bool), None
    # Every block left out is bounded by the least bound taken (read back from the bounds: using
    # top_k's values too turns XLA:CPU's TopK into a full sort of each row).
    left_out_Q = (jnp.take_along_axis(bounds_QxM, blocks_QxB, axis=1).min(1) if kb < num_blocks
                  else jnp.full(q, -jnp.inf))
    return top_s, top_i, top_s[:, -1] > left_out_Q, bounds_QxM


def auto_block(n: int, rescored_blocks: int, d: int) -> int:
    """Documents per block for :func:`retrieve`: the block maxima kept (``Q N / block``, each
    written and ranked by ``top_k``) against the rows rescored (``Q rescored_blocks block D``
    gathered) cost least near ``3 sqrt(N / (rescored_blocks D))``; a power of two in [4, 64]. The
    constant is fit on a 2-core AMD Zen 4 at 1M x 128 and 117,659 x 384, k = 10 and 100
    (bench/README, "Per machine kind")."""
    best = 3 * math.sqrt(n / (rescored_blocks * d))
    return int(min(64, max(4, 2 ** round(math.log2(max(best, 1e-9))))))


MAX_RESCORED_BLOCKS = 1024  # per unproven query; one with more candidates is scanned again
AUTO_PROBE = 64  # queries that decide whether scan_dtype="auto" keeps its bfloat16 scan
AUTO_MAX_UNPROVEN = 0.25  # above it, settling costs more than a float32 scan (bench/README)


def _settle(q_QxD, c_NxD, scores, indices, proven, bounds, *, k: int, similarity: str,
            block: int, search) -> tuple[jax.Array, jax.Array]:
    """Make exact the queries a bfloat16 scan did not prove. A query's ``k``-th rescored score is
    a true score, so at most its true ``k``-th: every block whose bound reaches it is rescored in
    float32 (those blocks hold every document that can rank). A query with more candidate blocks
    than ``MAX_RESCORED_BLOCKS`` (or a quarter of the corpus), or a NaN, is scanned again in float32.
    Time ``O(U (M + C block D))`` for ``U`` unproven queries with ``C`` candidate blocks of ``M``."""
    unproven = np.flatnonzero(~np.asarray(proven))
    if not unproven.size:
        return scores, indices
    kth = np.asarray(scores[unproven, -1])
    bounds = np.asarray(bounds[unproven])
    candidate = bounds >= kth[:, None]
    counts = candidate.sum(1)
    cap = min(MAX_RESCORED_BLOCKS, max(2 * k, bounds.shape[1] // 4))
    fine = np.isfinite(kth) & ~np.isnan(bounds).any(1) & (counts <= cap)
    # Calls of 64 queries and a power-of-two width (at least 16 blocks): few shapes compile.
    widths = np.maximum(16, 2 ** np.ceil(np.log2(np.maximum(counts, 1)))).astype(int)
    for width in np.unique(widths[fine]):
        rows = np.flatnonzero(fine & (widths == width))
        for part in np.array_split(rows, -(-rows.size // 64)):
            blocks = np.zeros((64, width), np.int32)
            valid = np.zeros((64, width), bool)
            for j, r in enumerate(part):
                cand = np.flatnonzero(candidate[r])
                blocks[j, :cand.size], valid[j, :cand.size] = cand, True
            who = unproven[part]
            s, i = _rank_blocks_jit(q_QxD[np.resize(who, 64)], c_NxD, blocks, valid, k=k,
                                    block=block, similarity=similarity)
            scores = scores.at[who].set(s[:part.size])
            indices = indices.at[who].set(i[:part.size])
    again = unproven[~fine]
    if again.size:  # padded to a power of two (repeating one), so few distinct shapes compile
        padded = np.resize(again, min(1 << (again.size - 1).bit_length(), q_QxD.shape[0]))
        s, i, _, _ = search(q_QxD[padded], c_NxD)
        scores, indices = scores.at[padded].set(s), indices.at[padded].set(i)
    return scores, indices


BRUTE_FORCE = 1 << 22  # query x corpus scores up to which one matrix and one top-k are used


@functools.partial(jax.jit, static_argnames=("k", "similarity"))
def _topk_brute(q_QxD, c_NxD, *, k: int, similarity: str):
    return jax.lax.top_k(similarity_matrix(q_QxD, c_NxD, similarity), k)


def retrieve(queries, corpus, *, k: int = 10, similarity: str = "cosine",
             query_chunk: int = 4096, corpus_chunk: int = 8192, block: int | None = None,
             scan_dtype: str = "auto") -> tuple[jax.Array, jax.Array]:
    """Exact top-``k`` search: ``(scores [Q, k], indices [Q, k])``, best first.

    Time ``O(Q N D)``. Up to ``BRUTE_FORCE`` query-document pairs, one score matrix and one
    ``top_k``. Above, the corpus is scored in chunks of ``corpus_chunk`` keeping only each
    ``block`` of documents' best score (by default :func:`auto_block`'s size for N, k and D); the
    ``k`` best blocks of each query are then rescored document by document
    (:func:`_topk_blocks`). Queries go in batches of ``query_chunk`` (fewer
    when the block maxima of one batch would pass 512 MiB), so memory is
    ``O(query_chunk * (corpus_chunk + N / block))``.
    Ties go to the lower corpus index.

    ``scan_dtype="bfloat16"`` scores the chunks from bfloat16-rounded vectors (float32 sums; faster
    on CPUs with bfloat16 dot products) and the result stays exact: each block's maximum
    is raised by the rounding's proven bound, twice as many blocks are rescored in float32, and a
    query whose ``k``-th score does not beat every block left out has all blocks that can still
    hold a neighbour rescored, or is scanned again in float32 (:func:`_settle`; near-ties within
    the bound, as in tight clusters, cost that). ``"auto"`` takes bfloat16 where its dot products
    are fast (:func:`bfloat16_is_fast`) and keeps it only while the first ``AUTO_PROBE`` queries
    leave at most ``AUTO_MAX_UNPROVEN`` of them unproven; ``"float32"`` scans in float32.

    >>> s, i = retrieve(jnp.eye(2), jnp.asarray([[0., 1.], [1., 0.], [1., 1.]]), k=2)
    >>> i.tolist()
    [[1, 2], [0, 2]]
    """
    queries, corpus = jnp.asarray(queries), jnp.asarray(corpus)
    if queries.ndim != 2 or corpus.ndim != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError(f"retrieve expects queries [Q, D] and corpus [N, D]; got {queries.shape} "
                         f"and {corpus.shape}")
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r}; choose from {SIMILARITIES}")
    if scan_dtype not in SCAN_DTYPES:
        raise ValueError(f"unknown scan_dtype {scan_dtype!r}; choose from {SCAN_DTYPES}")
    n = corpus.shape[0]
    k = min(k, n)
    if queries.shape[0] * n <= BRUTE_FORCE:  # one score matrix is cheapest: no second stage
        return _topk_brute(queries, corpus, k=k, similarity=similarity)
    traced = isinstance(queries, jax.core.Tracer) or isinstance(corpus, jax.core.Tracer)
    low = (scan_dtype == "bfloat16" or scan_dtype == "auto" and bfloat16_is_fast()) and (
        jnp.issubdtype(queries.dtype, jnp.floating) and jnp.issubdtype(corpus.dtype, jnp.floating)
        and not traced)  # settling reads which queries were proven: not inside a trace
    probe = scan_dtype == "auto" and low and queries.shape[0] >= 4 * AUTO_PROBE
    if similarity == "cosine":  # normalised once: the scan and every rescoring read the same rows
        queries, corpus, similarity = _normalize_jit(queries), _normalize_jit(corpus), "dot"
    block = max(1, min(block or auto_block(n, 2 * k if low else k, corpus.shape[1]), n))
    corpus_chunk = -(-min(corpus_chunk, n) // block) * block  # whole blocks
    query_chunk = max(1, min(query_chunk, 2 ** 27 // -(-n // block)))
    search = functools.partial(_topk_blocks, k=k, similarity=similarity,
                               corpus_chunk=corpus_chunk, block=block)
    scores, indices, start = [], [], 0
    while start < queries.shape[0]:
        q = queries[start:start + (AUTO_PROBE if probe else query_chunk)]
        s, idx, proven, bounds = search(q, corpus, low=low)
        if low:
            if probe and np.mean(~np.asarray(proven)) > AUTO_MAX_UNPROVEN:
                low = False  # near-ties: settling them would cost more than a float32 scan
            s, idx = _settle(q, corpus, s, idx, proven, bounds, k=k, similarity=similarity,
                             block=block, search=search)
        probe = False
        scores.append(s)
        indices.append(idx)
        start += q.shape[0]
    return jnp.concatenate(scores), jnp.concatenate(indices)


def ranked_metrics(gains_QxK: jax.Array, qrels_QxN, ks: Sequence[int]
                   ) -> dict[str, jax.Array]:
    """Per-query metrics from the grades of the retrieved documents in rank order (``gains_QxK``) and
    the full qrels (dense ``[Q, N]`` or :class:`SparseQrels`: for the number of relevant documents
    and the ideal ranking): ``{"ndcg@10": [Q]}``."""
    ideal_QxK, num_rel_Q = _ideal(qrels_QxN, gains_QxK.shape[1])
    return _ranked_metrics(gains_QxK, ideal_QxK, num_rel_Q, tuple(int(k) for k in ks))


def _ideal(qrels, kmax: int) -> tuple[jax.Array, jax.Array]:
    """Each query's ``kmax`` best grades (descending, zero-padded) and its relevant count."""
    if isinstance(qrels, SparseQrels):
        return jnp.asarray(qrels.ideal(kmax)), jnp.asarray(qrels.num_relevant())
    qrels = jnp.asarray(qrels, jnp.float32)
    ideal = -jnp.sort(-qrels, axis=1)[:, :kmax]
    return (jnp.pad(ideal, ((0, 0), (0, kmax - ideal.shape[1]))),
            jnp.sum(qrels >= 1, axis=1).astype(jnp.float32))


@functools.partial(jax.jit, static_argnames=("ks",))
def _ranked_metrics(gains_QxK, ideal_QxK, num_rel_Q, ks: tuple[int, ...]):
    # A grade <= 0 gains nothing, retrieved or ideal (trec_eval: negative grades mark junk).
    gains_QxK = jnp.maximum(jnp.asarray(gains_QxK, jnp.float32), 0.0)
    ideal_QxK = jnp.maximum(jnp.asarray(ideal_QxK, jnp.float32), 0.0)
    num_rel_Q = jnp.asarray(num_rel_Q, jnp.float32)
    kmax = gains_QxK.shape[1]
    rel_QxK = (gains_QxK >= 1).astype(jnp.float32)
    discount_K = 1.0 / jnp.log2(jnp.arange(kmax, dtype=jnp.float32) + 2.0)
    ranks_K = jnp.arange(1, kmax + 1, dtype=jnp.float32)
    hits_QxK = jnp.cumsum(rel_QxK, axis=1)
    first_rel_Q = jnp.argmax(rel_QxK, axis=1)  # 0 when nothing relevant is retrieved (masked below)
    safe_rel = jnp.maximum(num_rel_Q, 1.0)
    out = {}
    for k in ks:
        kk = min(k, kmax)
        hits = hits_QxK[:, kk - 1]
        dcg = jnp.sum(gains_QxK[:, :kk] * discount_K[None, :kk], axis=1)
        idcg = jnp.sum(ideal_QxK[:, :kk] * discount_K[None, :kk], axis=1)
        found = hits > 0
        out[f"recall@{k}"] = hits / safe_rel
        out[f"precision@{k}"] = hits / k
        out[f"mrr@{k}"] = jnp.where(found, 1.0 / (first_rel_Q + 1.0), 0.0)
        out[f"ndcg@{k}"] = jnp.where(idcg > 0, dcg / jnp.where(idcg > 0, idcg, 1.0), 0.0)
        out[f"map@{k}"] = (jnp.sum(rel_QxK[:, :kk] * hits_QxK[:, :kk] / ranks_K[None, :kk], 1)
                            / safe_rel)
    return out


@dataclasses.dataclass(frozen=True)
class SparseQrels:
    """Graded judgements kept sparse: ``J`` (query row, document column, grade) triples standing
    for a ``[Q, N]`` qrels matrix whose other cells are 0 (10^4 queries x 10^6 documents would be
    10^10 dense cells). Memory ``O(J)``; looking up the grades of ``[Q, k]`` retrieved documents
    costs ``O(Q k log J)``.

    >>> r = SparseQrels([0, 0, 1], [2, 0, 1], [1, 2, 1], (2, 3))
    >>> r.gains(np.asarray([[0, 1], [1, 2]])).tolist(), r.ideal(3).tolist()
    ([[2.0, 0.0], [1.0, 0.0]], [[2.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    """
    query: np.ndarray
    doc: np.ndarray
    grade: np.ndarray
    shape: tuple[int, int]

    def __post_init__(self):
        q, d = np.asarray(self.query, np.int64), np.asarray(self.doc, np.int64)
        g = np.asarray(self.grade, np.int32)
        if not (q.shape == d.shape == g.shape) or q.ndim != 1:
            raise ValueError(f"SparseQrels: query, doc and grade must be equal-length vectors; got "
                             f"{q.shape}, {d.shape}, {g.shape}")
        nq, nd = self.shape
        if len(q) and (q.min() < 0 or q.max() >= nq or d.min() < 0 or d.max() >= nd):
            raise ValueError(f"SparseQrels: an index lies outside the shape {self.shape}")
        keys = q * nd + d
        order = np.argsort(keys, kind="stable")
        if len(keys) > 1 and (np.diff(keys[order]) == 0).any():
            raise ValueError("SparseQrels: a (query, document) pair is judged twice")
        for name, v in (("query", q), ("doc", d), ("grade", g)):
            object.__setattr__(self, name, v[order])
        object.__setattr__(self, "_keys", keys[order])

    def __len__(self) -> int:
        return self.shape[0]

    def gains(self, indices_QxK) -> np.ndarray:
        """The grades of the retrieved documents ``indices_QxK`` (0 where unjudged)."""
        idx = np.asarray(indices_QxK, np.int64)
        keys = np.arange(idx.shape[0], dtype=np.int64)[:, None] * self.shape[1] + idx
        pos = np.minimum(np.searchsorted(self._keys, keys), max(len(self._keys) - 1, 0))
        hit = self._keys[pos] == keys if len(self._keys) else np.zeros(keys.shape, bool)
        return np.where(hit, self.grade[pos], 0).astype(np.float32)

    def ideal(self, k: int) -> np.ndarray:
        """``[Q, k]``: each query's ``k`` best grades, descending, zero-padded."""
        order = np.lexsort((-self.grade, self.query))
        q, g = self.query[order], self.grade[order]
        starts = np.searchsorted(q, np.arange(self.shape[0]))
        rank = np.arange(len(q)) - starts[q]
        keep = rank < k
        out = np.zeros((self.shape[0], k), np.float32)
        out[q[keep], rank[keep]] = g[keep]
        return out

    def num_relevant(self) -> np.ndarray:
        """``[Q]``: judgements with grade >= 1 (trec_eval's ``relevance_level=1``)."""
        return np.bincount(self.query[self.grade >= 1], minlength=self.shape[0]).astype(np.float32)

    def dense(self) -> np.ndarray:
        """The ``[Q, N]`` int32 matrix (small collections, tests)."""
        out = np.zeros(self.shape, np.int32)
        out[self.query, self.doc] = self.grade
        return out

    def rows(self, n: int) -> "SparseQrels":
        """The judgements of the first ``n`` queries."""
        keep = self.query < n
        return SparseQrels(self.query[keep], self.doc[keep], self.grade[keep], (n, self.shape[1]))


def rerank(queries_QxD, corpus_NxD, candidates_QxS, *, k: int, similarity: str = "cosine"
           ) -> tuple[jax.Array, jax.Array]:
    """``(scores [Q, k], indices [Q, k])``: each query's shortlisted corpus indices reordered by
    exact ``similarity`` scores (stable: ties keep the shortlist's order).

    >>> s, i = rerank(jnp.asarray([[1., 0.]]), jnp.asarray([[0., 1.], [1., 0.], [1., 1.]]),
    ...               jnp.asarray([[0, 2, 1]]), k=2)
    >>> i.tolist()
    [[1, 2]]
    """
    candidates_QxS = jnp.asarray(candidates_QxS)
    exact_QxS = jax.vmap(lambda q, ids: similarity_matrix(q[None], corpus_NxD[ids], similarity)[0])(
        jnp.asarray(queries_QxD), candidates_QxS)
    order = jnp.argsort(-exact_QxS, axis=1, stable=True)[:, :k]
    return (jnp.take_along_axis(exact_QxS, order, axis=1),
            jnp.take_along_axis(candidates_QxS, order, axis=1))


def judged_queries(qrels_QxN) -> np.ndarray:
    """Boolean mask of the queries that have at least one relevant document."""
    if isinstance(qrels_QxN, SparseQrels):
        return qrels_QxN.num_relevant() > 0
    return np.asarray(jnp.any(jnp.asarray(qrels_QxN) >= 1, axis=1))


def retrieval_metrics(scores, qrels, ks: Sequence[int] = (1, 5, 10), *,
                      per_query: bool = False) -> dict[str, float] | dict[str, jax.Array]:
    """Ranking metrics of a score matrix against graded relevance judgements.

    Args:
      scores: ``[Q, N]`` query-document scores (higher = better).
      qrels: ``[Q, N]`` integer grades, 0 = not relevant.
      ks: cut-offs; keys are ``f"{metric}@{k}"`` for metric in ``recall, precision, mrr, ndcg, map``.
      per_query: return ``[Q']`` arrays over the judged queries (for :func:`bootstrap_ci`) instead of
        their means.

    >>> m = retrieval_metrics(jnp.asarray([[0.9, 0.1, 0.5]]), jnp.asarray([[0, 1, 2]]), ks=(1, 3))
    >>> round(m["recall@3"], 3), round(m["mrr@3"], 3), round(m["ndcg@3"], 3)
    (1.0, 0.5, 0.67)
    """
    scores, qrels = jnp.asarray(scores), jnp.asarray(qrels)
    if scores.shape != qrels.shape or scores.ndim != 2:
        raise ValueError(f"scores and qrels must both be [Q, N]; got {scores.shape} and "
                         f"{qrels.shape}")
    order_QxN = jnp.argsort(-scores, axis=1, stable=True)[:, :max(ks)]
    gains = jnp.take_along_axis(qrels, order_QxN, axis=1)
    return _reduce(ranked_metrics(gains, qrels, ks), judged_queries(qrels), per_query)


def _reduce(per_q: dict[str, jax.Array], judged: np.ndarray, per_query: bool):
    if not judged.any():
        raise ValueError("no query has a relevant document (a grade >= 1)")
    per_q = {k: v[judged] for k, v in per_q.items()}
    return per_q if per_query else {k: float(jnp.mean(v)) for k, v in per_q.items()}


def class_qrels(query_labels, corpus_labels, *, pair_grade: int | None = None) -> np.ndarray:
    """``[Q, N]`` int8 qrels from class labels: 1 where the classes match; with ``pair_grade``,
    query ``i``'s own document ``i`` (paired test sets) gets that grade instead.

    >>> class_qrels([0, 1], [0, 1], pair_grade=2).tolist()
    [[2, 0], [0, 2]]
    """
    q, c = np.asarray(query_labels), np.asarray(corpus_labels)
    qrels = (q[:, None] == c[None, :]).astype(np.int8)
    if pair_grade is not None:
        np.fill_diagonal(qrels, pair_grade)
    return qrels


def topk_metrics(indices_QxK, qrels_QxN, ks: Sequence[int] = (1, 5, 10), *,
                 per_query: bool = False):
    """:func:`retrieval_metrics` from retrieved indices (e.g. :func:`retrieve`'s) instead of a full
    score matrix; ``qrels_QxN`` dense or :class:`SparseQrels`."""
    if isinstance(qrels_QxN, SparseQrels):
        gains = jnp.asarray(qrels_QxN.gains(indices_QxK))
        qrels = qrels_QxN
    else:
        qrels = jnp.asarray(qrels_QxN)
        gains = jnp.take_along_axis(qrels, jnp.asarray(indices_QxK), axis=1)
    return _reduce(ranked_metrics(gains, qrels, ks), judged_queries(qrels), per_query)


# --------------------------------------------------------------------------------------------------
# Evaluator
# --------------------------------------------------------------------------------------------------

def retrieval_tasks(embedder, variables, *, max_queries: int = 2000, sparse: bool = False):
    """``(prefix, query_features, corpus_features, qrels, exclude)`` for every retrieval task the
    embedder knows: its ``test`` split when it holds pairs (query ``x[i]`` → corpus ``x_pos[i]``, the
    first ``max_queries`` pairs, both in the space pairs are compared in, e.g. a dual encoder's two
    projections), then each retrieval evaluation set (prefixed with its name; a corpus of the pairs'
    second kind, such as WordNet lemma lists or BEIR documents, goes through the pair function
    too). ``exclude`` (``[Q]`` corpus indices or None) is left out of each query's results.
    ``sparse``: the features as scipy CSR matrices (a sparse encoder's term weights,
    :meth:`repr_jax.eval.base.Embedder.embed`)."""
    test = embedder.splits.get("test", {})
    if "x_pos" in test and embedder.pairs_ok:
        n = min(max_queries, len(test["x"]))
        q = embedder.embed(variables, test["x"][:n], "query", sparse=sparse)
        c = embedder.embed(variables, test["x_pos"][:n], "pos", sparse=sparse)
        if q.shape[1] == c.shape[1]:
            yield "", q, c, np.eye(n, dtype=np.int8), None
    for s in embedder.sets("retrieval"):
        paired = getattr(s, "corpus_is_pos", False) and embedder.pairs_ok
        yield (f"{s.name}/",
               embedder.embed(variables, s.queries, "query" if paired else "x", sparse=sparse),
               embedder.embed(variables, s.corpus, "pos" if paired else "x", sparse=sparse),
               s.qrels, getattr(s, "exclude", None))


def per_query_metrics(embedder, variables, *, ks: Sequence[int], similarity: str = "cosine",
                      max_queries: int = 2000):
    """``(prefix, {metric: [Q] per-query values})`` of exact top-k retrieval on every task of
    :func:`retrieval_tasks` (a query that is also a document does not retrieve itself): what
    the retrieval evaluator reports and ``repr-jax compare`` pairs across runs. Cost as
    :func:`retrieve` (``O(Q N D)`` time) plus ``O(Q k)`` for the metrics."""
    for prefix, q, c, qrels, exclude in retrieval_tasks(embedder, variables,
                                                        max_queries=max_queries):
        extra = int(exclude is not None)
        _, idx = retrieve(q, c, k=max(ks) + extra, similarity=similarity)
        if exclude is not None:
            idx = without(idx, exclude)
        yield prefix, topk_metrics(idx, qrels, ks, per_query=True)


def without(indices_QxK1, exclude_Q) -> np.ndarray:
    """``[Q, K]`` of ``[Q, K + 1]`` retrieved indices: each row without its ``exclude`` index
    (BEIR's ``ignore_identical_ids``: a query that is also a document does not retrieve itself),
    else without its last entry. Time and memory ``O(Q K)``.

    >>> without(np.asarray([[4, 2, 7], [1, 3, 5]]), np.asarray([2, 9])).tolist()
    [[4, 7], [1, 3]]
    """
    idx = np.asarray(indices_QxK1)
    drop = idx == np.asarray(exclude_Q)[:, None]
    drop &= np.cumsum(drop, axis=1) == 1  # the first match only
    drop[~drop.any(axis=1), -1] = True
    return idx[~drop].reshape(idx.shape[0], idx.shape[1] - 1)


@config
class RetrievalOptions:
    """``eval.retrieval.*``: the options of :class:`Retrieval` (its keyword arguments)."""
    metrics: tuple[str, ...] = static(("recall@1", "recall@10", "mrr@10", "ndcg@10", "map@10"),
                                      doc="metric@k, metric in recall | precision | mrr | ndcg "
                                          "| map")
    similarity: str = static("cosine", SIMILARITIES)
    max_queries: int = static(2000, ">0", "retrieval over the test pairs: first N pairs")

    def _validate(self):
        metric_cutoffs(self.metrics, option="eval.retrieval.metrics")


class Retrieval(Evaluator):
    """Exact top-k retrieval on every retrieval task (see :func:`retrieval_tasks`), with per-query
    bootstrap intervals.

    Cost (Q queries, N documents, D dims): time ``O(Q N D)``, memory ``O(N D + query_chunk x
    (corpus_chunk + N / block))`` (:func:`retrieve`); metrics ``O(Q k)`` from the top-k."""

    name = "retrieval"
    options = RetrievalOptions

    def __init__(self, embedder, *, metrics: Sequence[str] = ("recall@1", "recall@10", "mrr@10",
                                                             "ndcg@10", "map@10"),
                 similarity: str = "cosine", max_queries: int = 2000, bootstrap: int = 1000):
        super().__init__(embedder)
        self.metrics, self.similarity = tuple(metrics), similarity
        self.max_queries, self.bootstrap = max_queries, bootstrap
        self.ks = list(metric_cutoffs(self.metrics, option="eval.retrieval.metrics"))

    def run(self, variables):
        for prefix, per_q in per_query_metrics(self.embedder, variables, ks=self.ks,
                                               similarity=self.similarity,
                                               max_queries=self.max_queries):
            for m in self.metrics:
                yield prefix + m, with_ci(per_q[m], bootstrap=self.bootstrap)
