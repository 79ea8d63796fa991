"""Hybrid retrieval: two or three rankings of the same queries fused into one, by reciprocal rank
(RRF) or by a convex combination of normalised scores.

Each system gives, per query, its top ``K`` candidates best first (:class:`Ranking`: ids
``[Q, K]``, ``-1`` for a slot with no candidate, and their scores). A fused list ranks the union
of the candidates:

* **RRF** (Cormack, Clarke & Büttcher 2009): ``score(d) = sum_p 1 / (k + rank_p(d))``, ranks
  from 1 in each system's list (tied scores keep the list's order: its ranks are positions),
  a system that did not return ``d`` adding nothing; ``k = 60`` as the paper, Elastic and
  Vespa default to.
* **Convex** (Bruch, Gai & Ingber 2023, "An analysis of fusion functions for hybrid
  retrieval"): ``score(d) = sum_p w_p s'_p(d)``, ``s'_p`` system ``p``'s scores normalised
  over its own ``K`` candidates of that query: ``minmax`` ``(s - min) / (max - min)`` or
  ``zscore`` ``(s - mean) / std`` (population std). A list without spread (every score equal,
  e.g. a query with no BM25 term) normalises to 0 under both: no division by zero, and it
  says nothing. **A candidate missing from a system's list gets that list's lowest normalised
  score** (pyserini's hybrid convention, ``min_dense_score`` / ``min_sparse_score``: a
  document below the cut-off scored at most the last one listed); for min-max that is 0, what
  Elastic's linear retriever adds for a document a retriever did not return.

Ties in a fused score go to the lower document id (the retrieval evaluator's convention).
Rankings of different query sets are refused in one line. Cost: time ``O(Q M log(Q M))`` for
``M = sum_p K_p`` candidates a query (one sort of every (query, document) key), memory
``O(Q M)``; NumPy on the host (the lists are small).

The ``fusion`` evaluator (``eval.evaluators=('fusion',)``, options ``eval.fusion.*``) fuses,
within one run's evaluation, the run's own retrieval (``dense``: exact search over its vectors;
``sparse``: an inverted index over its term weights) with BM25 over the set's texts: each part's
and each fusion's metrics with bootstrap intervals, and each fusion's paired difference against
the best of its parts on the same queries.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from repr_jax.config import ConfigError, config, static
from repr_jax.eval.base import Evaluator
from repr_jax.eval.retrieval import (SIMILARITIES, SparseQrels, judged_queries, metric_cutoffs,
                                     ranked_metrics, retrieval_tasks, retrieve)
from repr_jax.eval.stats import Estimate, paired_bootstrap, with_ci

METHODS = ("rrf", "convex")
NORMALIZATIONS = ("minmax", "zscore")
PARTS = ("dense", "sparse", "bm25")
MISSING = -1  # an id slot with no candidate


@dataclasses.dataclass(frozen=True)
class Ranking:
    """One system's top-``K`` lists: ``ids`` ``[Q, K]`` (int64, best first, ``-1`` past its
    candidates), ``scores`` ``[Q, K]`` (float64; ignored where ``ids`` is ``-1``), ``name``,
    and optionally ``queries`` (``[Q]`` query ids, compared before fusing)."""
    name: str
    ids: np.ndarray
    scores: np.ndarray
    queries: tuple | None = None

    def __post_init__(self):
        ids = np.asarray(self.ids, np.int64)
        scores = np.asarray(self.scores, np.float64)
        if ids.ndim != 2 or ids.shape != scores.shape:
            raise ValueError(f"{self.name}: ids and scores must both be [Q, K]; got {ids.shape} "
                             f"and {scores.shape}")
        if (ids < MISSING).any():
            raise ValueError(f"{self.name}: document ids must be >= 0 (or -1: no candidate)")
        if not np.isfinite(scores[ids >= 0]).all():
            raise ValueError(f"{self.name}: scores must be finite (found NaN or inf)")
        if self.queries is not None and len(self.queries) != len(ids):
            raise ValueError(f"{self.name}: {len(self.queries)} query ids for {len(ids)} lists")
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "scores", scores)


def check_same_queries(rankings: Sequence[Ranking]) -> None:
    """A one-line ValueError unless every ranking answers the same queries in the same order
    (equal query ids where all give them; otherwise equal counts)."""
    if len(rankings) < 2:
        raise ValueError(f"fusion needs two or three rankings; got {len(rankings)}")
    first = rankings[0]
    for r in rankings[1:]:
        if len(r.ids) != len(first.ids):
            raise ValueError(f"fusion of runs over different query sets: {first.name} answers "
                             f"{len(first.ids)} queries, {r.name} {len(r.ids)}")
        if first.queries is not None and r.queries is not None:
            differ = [i for i, (a, b) in enumerate(zip(first.queries, r.queries)) if a != b]
            if differ:
                i = differ[0]
                raise ValueError(f"fusion of runs over different query sets: {first.name} and "
                                 f"{r.name} differ at {len(differ)} of {len(r.ids)} queries "
                                 f"(first at row {i}: {first.queries[i]!r} vs {r.queries[i]!r})")


def _fuse(rankings: Sequence[Ranking], contributions: Sequence[np.ndarray], base_Q: np.ndarray,
          name: str, top: int | None) -> Ranking:
    """Sums each (query, document)'s ``contributions`` over the rankings (plus ``base_Q``) and
    keeps each query's ``top`` best, ties to the lower id, ``-1`` past the union."""
    q = len(rankings[0].ids)
    ids = np.concatenate([r.ids for r in rankings], axis=1)
    gain = np.concatenate(contributions, axis=1)
    row = np.broadcast_to(np.arange(q)[:, None], ids.shape)
    present = ids >= 0
    keys, where = np.unique(np.stack([row[present], ids[present]], 1), axis=0,
                            return_inverse=True)
    total = np.bincount(where.reshape(-1), weights=gain[present], minlength=len(keys))
    total = total + base_Q[keys[:, 0]]
    # by query, score down, id up; equal sums added in another order are equal ties
    order = np.lexsort((keys[:, 1], -np.round(total, 12), keys[:, 0]))
    keys, total = keys[order], total[order]
    starts = np.searchsorted(keys[:, 0], np.arange(q))
    pos = np.arange(len(keys)) - starts[keys[:, 0]]
    width = top if top is not None else max(r.ids.shape[1] for r in rankings)
    keep = pos < width
    out_ids = np.full((q, width), MISSING, np.int64)
    out_scores = np.full((q, width), -np.inf)
    out_ids[keys[keep, 0], pos[keep]] = keys[keep, 1]
    out_scores[keys[keep, 0], pos[keep]] = total[keep]
    return Ranking(name, out_ids, np.where(out_ids >= 0, out_scores, 0.0), rankings[0].queries)


def rrf(rankings: Sequence[Ranking], *, k: float = 60, top: int | None = None) -> Ranking:
    """Reciprocal rank fusion: ``sum_p 1 / (k + rank_p(d))`` over the systems that returned
    ``d`` (ranks from 1, each list's positions among its candidates). ``top``: the fused list's
    width (default the widest input's). Time ``O(Q M log(Q M))``.

    >>> a = Ranking("a", [[3, 1, 2]], [[0.9, 0.5, 0.1]])
    >>> b = Ranking("b", [[1, 4, -1]], [[7.0, 2.0, 0.0]])
    >>> fused = rrf([a, b], k=1)
    >>> fused.ids.tolist(), fused.scores.round(4).tolist()
    ([[1, 3, 4]], [[0.8333, 0.5, 0.3333]])
    """
    if not k > 0:
        raise ValueError(f"rrf: k must be > 0; got {k}")
    check_same_queries(rankings)
    contributions = []
    for r in rankings:
        rank = np.cumsum(r.ids >= 0, axis=1)  # 1, 2, ... over the list's candidates
        contributions.append(np.where(r.ids >= 0, 1.0 / (k + rank), 0.0))
    name = "rrf(" + "+".join(r.name for r in rankings) + ")"
    return _fuse(rankings, contributions, np.zeros(len(rankings[0].ids)), name, top)


def normalize_scores(ranking: Ranking, how: str = "minmax") -> tuple[np.ndarray, np.ndarray]:
    """``(normalised [Q, K], lowest [Q])``: each query's candidate scores normalised over that
    query's list (``minmax`` or ``zscore``; a list without spread, or with one candidate, gives
    0), and each list's lowest normalised score (0 for an empty list), what a missing candidate
    gets. Time ``O(Q K)``.

    >>> s, low = normalize_scores(Ranking("a", [[0, 1, 2], [0, 1, -1]], [[4, 2, 0], [5, 5, 0]]))
    >>> s.tolist(), low.tolist()
    ([[1.0, 0.5, 0.0], [0.0, 0.0, 0.0]], [0.0, 0.0])
    """
    if how not in NORMALIZATIONS:
        raise ValueError(f"normalize={how!r}; choose from {', '.join(NORMALIZATIONS)}")
    present = ranking.ids >= 0
    count = present.sum(1)
    s = np.where(present, ranking.scores, 0.0)
    if how == "minmax":
        lo = np.where(present, s, np.inf).min(1)
        hi = np.where(present, s, -np.inf).max(1)
        spread = hi - lo
        ok = (count > 0) & (spread > 0)
        out = (s - np.where(ok, lo, 0)[:, None]) / np.where(ok, spread, 1)[:, None]
    else:
        mean = s.sum(1) / np.maximum(count, 1)
        std = np.sqrt((np.where(present, s - mean[:, None], 0) ** 2).sum(1) / np.maximum(count, 1))
        ok = (count > 0) & (std > 0)
        out = (s - mean[:, None]) / np.where(ok, std, 1)[:, None]
    out = np.where(present & ok[:, None], out, 0.0)
    lowest = np.where(ok, np.where(present, out, np.inf).min(1), 0.0)
    return out, lowest


def convex(rankings: Sequence[Ranking], weights: Sequence[float] | None = None, *,
           normalize: str = "minmax", top: int | None = None) -> Ranking:
    """Convex fusion: ``sum_p w_p s'_p(d)``, ``s'_p`` :func:`normalize_scores`' (a candidate
    missing from list ``p`` gets its lowest normalised score). ``weights``: one per ranking,
    non-negative, not all 0 (default equal; they are used as given, not rescaled). Time
    ``O(Q M log(Q M))``.

    >>> a = Ranking("a", [[3, 1, 2]], [[0.9, 0.5, 0.1]])
    >>> b = Ranking("b", [[1, 4, -1]], [[7.0, 2.0, 0.0]])
    >>> fused = convex([a, b], (0.5, 0.5))
    >>> fused.ids.tolist(), fused.scores.round(4).tolist()
    ([[1, 3, 2]], [[0.75, 0.5, 0.0]])
    """
    check_same_queries(rankings)
    w = np.full(len(rankings), 1.0 / len(rankings)) if weights is None else np.asarray(
        weights, np.float64)
    if w.shape != (len(rankings),) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"convex: weights must be {len(rankings)} non-negative numbers, not all "
                         f"0 (one per ranking); got {tuple(np.atleast_1d(w).tolist())}")
    contributions, base = [], np.zeros(len(rankings[0].ids))
    for wp, r in zip(w, rankings):
        s, lowest = normalize_scores(r, normalize)
        base += wp * lowest  # every document starts at the lowest, listed ones gain the rest
        contributions.append(np.where(r.ids >= 0, wp * (s - lowest[:, None]), 0.0))
    name = f"convex-{normalize}(" + "+".join(r.name for r in rankings) + ")"
    return _fuse(rankings, contributions, base, name, top)


def ranking_metrics(ids_QxK, qrels, ks: Sequence[int]) -> dict[str, np.ndarray]:
    """Per-query metrics (``{"ndcg@10": [Q']}`` over the judged queries, as
    :func:`repr_jax.eval.retrieval.topk_metrics` with ``per_query=True``) of ranked ids where
    ``-1`` (no candidate) gains nothing. ``qrels``: dense ``[Q, N]`` or :class:`SparseQrels`."""
    ids = np.asarray(ids_QxK, np.int64)
    safe = np.maximum(ids, 0)
    if isinstance(qrels, SparseQrels):
        gains = qrels.gains(safe)
    else:
        gains = np.take_along_axis(np.asarray(qrels), safe, axis=1).astype(np.float32)
    gains = np.where(ids >= 0, gains, 0.0)
    judged = judged_queries(qrels)
    if not judged.any():
        raise ValueError("no query has a relevant document (a grade >= 1)")
    return {m: np.asarray(v)[judged] for m, v in ranked_metrics(gains, qrels, ks).items()}


# --------------------------------------------------------------------------------------------------
# Evaluator
# --------------------------------------------------------------------------------------------------

@config
class FusionOptions:
    """``eval.fusion.*``: the options of :class:`Fusion` (its keyword arguments)."""
    methods: tuple[str, ...] = static(METHODS, doc="rrf | convex (each a row set)")
    parts: tuple[str, ...] = static(("dense", "bm25"),
                                    doc="dense (the run's vectors, exact search) or sparse "
                                        "(a splade run's term weights, inverted index), and "
                                        "bm25 (the set's texts)")
    depth: int = static(100, ">0", "candidates each part gives per query")
    rrf_k: int = static(60, ">0", "RRF's k: score = sum 1 / (k + rank)")
    weights: tuple[float, ...] = static((), doc="convex weights, one per part in parts' order "
                                                "(() = equal)")
    normalize: str = static("minmax", NORMALIZATIONS, "convex: scores normalised per query list")
    similarity: str = static("cosine", SIMILARITIES, "the dense part's similarity")
    metrics: tuple[str, ...] = static(("ndcg@10", "recall@10", "mrr@10"),
                                      doc="metric@k with k <= depth")
    max_queries: int = static(2000, ">0", "retrieval over the test pairs: first N pairs")

    def _validate(self):
        check_fusion(methods=self.methods, parts=self.parts, weights=self.weights,
                     metrics=self.metrics, depth=self.depth)


def check_fusion(*, methods, parts, weights, metrics, depth) -> None:
    """The ``eval.fusion`` options' checks, one line each (ConfigError, a ValueError)."""
    for m in methods:
        if m not in METHODS:
            raise ConfigError(f"eval.fusion.methods: {m!r}; choose from {', '.join(METHODS)}")
    if not methods:
        raise ConfigError(f"eval.fusion.methods: none given; choose from {', '.join(METHODS)}")
    if not 2 <= len(parts) <= 3 or len(set(parts)) != len(parts) or set(parts) - set(PARTS):
        raise ConfigError(f"eval.fusion.parts: {tuple(parts)}: give two or three different "
                          f"parts of {', '.join(PARTS)}")
    if {"dense", "sparse"} <= set(parts):
        raise ConfigError("eval.fusion.parts: 'dense' and 'sparse' are both the run's own "
                          "search (a run's features are vectors or term weights, not both); to "
                          "fuse a dense run with a sparse one and BM25: repr-jax compare "
                          "rrf:bm25+DENSE_RUN+SPARSE_RUN")
    if weights and (len(weights) != len(parts) or min(weights) < 0 or sum(weights) <= 0):
        raise ConfigError(f"eval.fusion.weights: {tuple(weights)}: one non-negative weight per "
                          f"part ({len(parts)}), not all 0, or () for equal weights")
    deepest = max(metric_cutoffs(metrics, option="eval.fusion.metrics"))
    if deepest > depth:
        raise ConfigError(f"eval.fusion.metrics: a cut-off of {deepest} is deeper than "
                          f"eval.fusion.depth={depth} (fusion ranks only the parts' candidates)")


def _part_ranking(part: str, q, c, s, depth: int, extra: int, similarity: str) -> Ranking:
    """Part ``part``'s top ``depth + extra`` on one task (``s``: its set, for BM25's texts)."""
    n = c.shape[0] if part != "bm25" else len(s.texts[1])
    k = min(depth + extra, n)
    if part == "dense":
        scores, ids = retrieve(q, c, k=k, similarity=similarity)
    elif part == "sparse":
        from repr_jax.eval.sparse_retrieval import as_csr, build_index, search
        try:
            index = build_index(c)
            out = search(index, as_csr(q, index.vocab, what="queries"), k)
        except ValueError as e:
            raise ValueError(f"fusion's sparse part: {e}; it needs a sparse encoder's term "
                             f"weights") from None
        ids, scores = out.ids, out.scores
    else:
        from repr_jax.eval.bm25 import BM25
        ids, scores = BM25(s.texts[1]).topk(s.texts[0], k)
    queries = tuple(s.texts[0]) if getattr(s, "texts", None) is not None else None
    return Ranking(part, np.asarray(ids), np.asarray(scores), queries)


def leave_out(r: Ranking, exclude) -> Ranking:
    """``r`` with each query's ``exclude`` document (a query that is also a document; ``-1``:
    none) taken out of its list, the rest moved up. Time ``O(Q K log K)``.

    >>> leave_out(Ranking("a", [[4, 2, 7], [1, 3, 5]], [[3, 2, 1], [3, 2, 1]]), [2, -1]).ids
    array([[ 4,  7, -1],
           [ 1,  3,  5]])
    """
    if exclude is None:
        return r
    drop = r.ids == np.asarray(exclude)[:, None]
    order = np.argsort(drop, axis=1, kind="stable")
    ids = np.where(np.take_along_axis(drop, order, 1), MISSING,
                   np.take_along_axis(r.ids, order, 1))
    return Ranking(r.name, ids, np.take_along_axis(r.scores, order, 1), r.queries)


class Fusion(Evaluator):
    """Hybrid retrieval within one run: its ``parts`` (the run's own search, dense over its
    vectors or sparse over a splade run's term weights, and BM25 over the set's texts), each to
    ``depth`` candidates, fused by each of ``methods`` (:func:`rrf`, :func:`convex`) on every
    retrieval task that has what the parts need (BM25: a text set). Rows: ``set/<part>/<metric>`` and ``set/<method>/<metric>``
    with bootstrap intervals, and ``set/<method>_gain/<metric>``: the fusion minus the best
    part on that metric (by mean), a paired bootstrap interval over the same queries.

    Cost: the parts (dense ``O(Q N D)``, sparse :func:`~repr_jax.eval.sparse_retrieval.search`,
    BM25 ``O(Q N)``), the fusions ``O(Q M log(Q M))`` for ``M`` = parts x depth, the intervals
    ``O(B Q)`` a row."""

    name = "fusion"
    options = FusionOptions

    def __init__(self, embedder, *, methods: Sequence[str] = METHODS,
                 parts: Sequence[str] = ("dense", "bm25"), depth: int = 100, rrf_k: int = 60,
                 weights: Sequence[float] = (), normalize: str = "minmax",
                 similarity: str = "cosine",
                 metrics: Sequence[str] = ("ndcg@10", "recall@10", "mrr@10"),
                 max_queries: int = 2000, bootstrap: int = 1000):
        super().__init__(embedder)
        FusionOptions(methods=tuple(methods), parts=tuple(parts), depth=depth, rrf_k=rrf_k,
                      weights=tuple(weights), normalize=normalize, similarity=similarity,
                      metrics=tuple(metrics), max_queries=max_queries)  # the section's checks
        self.methods, self.parts = tuple(methods), tuple(parts)
        self.depth, self.rrf_k, self.weights = depth, rrf_k, tuple(weights) or None
        self.normalize, self.similarity = normalize, similarity
        self.metrics, self.max_queries, self.bootstrap = tuple(metrics), max_queries, bootstrap
        self.ks = list(metric_cutoffs(self.metrics, option="eval.fusion.metrics"))

    def fuse(self, method: str, rankings: Sequence[Ranking]) -> Ranking:
        if method == "rrf":
            return rrf(rankings, k=self.rrf_k, top=self.depth)
        return convex(rankings, self.weights, normalize=self.normalize, top=self.depth)

    def run(self, variables):
        sets = {f"{s.name}/": s for s in self.embedder.sets("retrieval")}
        for prefix, q, c, qrels, exclude in retrieval_tasks(self.embedder, variables,
                                                            max_queries=self.max_queries,
                                                            sparse="sparse" in self.parts):
            s = sets.get(prefix)
            if "bm25" in self.parts and getattr(s, "texts", None) is None:
                continue  # BM25 needs a text set's texts
            extra = int(exclude is not None)
            rankings = [leave_out(_part_ranking(p, q, c, s, self.depth, extra,
                                                self.similarity), exclude)
                        for p in self.parts]
            per_part = {r.name: ranking_metrics(r.ids, qrels, self.ks) for r in rankings}
            for part, per_q in per_part.items():
                for m in self.metrics:
                    yield f"{prefix}{part}/{m}", with_ci(per_q[m], bootstrap=self.bootstrap)
            for method in self.methods:
                fused = ranking_metrics(self.fuse(method, rankings).ids, qrels, self.ks)
                for m in self.metrics:
                    best = max(per_part.values(), key=lambda v: float(np.mean(v[m])))[m]
                    yield f"{prefix}{method}/{m}", with_ci(fused[m], bootstrap=self.bootstrap)
                    yield f"{prefix}{method}_gain/{m}", paired_gain(fused[m], best,
                                                                    self.bootstrap)


def paired_gain(values, baseline, bootstrap: int) -> float:
    """The mean paired difference ``values - baseline`` over the same queries, an
    :class:`Estimate` with its paired bootstrap interval when ``bootstrap`` > 0."""
    if not bootstrap:
        return float(np.mean(np.asarray(values) - np.asarray(baseline)))
    test = paired_bootstrap(values, baseline, num_resamples=bootstrap)
    return Estimate(test["difference"], test["low"], test["high"])
