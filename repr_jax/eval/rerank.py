"""Second-stage reranking: a first stage's top-k of each query, rescored by a model that reads
the query with each document (a cross-encoder, ColBERT's MaxSim), and the metrics before and after.

The first stage is BM25 over the set's texts (:mod:`repr_jax.eval.bm25`) or a function giving a
set's top-k (``eval.rerank.first_stage=RUN_DIR``: a trained text bi-encoder run, whose own
tokenizer, lengths and towers embed the set and exact search takes its top-k, or ``minilm`` / a
sentence-transformers folder over the set's texts; :func:`repr_jax.train.compare.run_candidates`).
A run that is no first stage (a cross-encoder's or ColBERT's pooled vector, an image run) is
refused before any work. Reranking only reorders the candidates: metrics at cut-offs within
the depth can change, a document outside the first stage's top-k never enters. Each metric is
reported for the first stage, after reranking, and as their paired difference (a bootstrap over
the same queries, :func:`repr_jax.eval.stats.paired_bootstrap`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import ConfigError, config, static
from repr_jax.eval.base import Evaluator, trim_padding
from repr_jax.eval.retrieval import metric_cutoffs, topk_metrics, without
from repr_jax.eval.stats import Estimate, paired_bootstrap, with_ci

BM25 = "bm25"


def score_pairs(score_fn: Callable, variables: Any, queries, docs, q_of: np.ndarray,
                d_of: np.ndarray, *, pad_id: int, batch_size: int = 64, progress: str = ""
                ) -> np.ndarray:
    """``[P]``: ``score_fn(variables, q_ids [B, Tq], d_ids [B, Td]) -> [B]`` of each pair ``p``
    (query ``queries[q_of[p]]``, document ``docs[d_of[p]]``, token-id rows). Pairs go shortest
    document first, each batch cut to its longest query and document, every batch
    ``batch_size`` pairs (the last padded): a few compiled shapes. Cost: ``P`` pair passes,
    ``O(P (Tq + Td)^2)`` for a cross-encoder; memory one batch."""
    from tqdm.auto import tqdm
    q_of, d_of = np.asarray(q_of, np.int64), np.asarray(d_of, np.int64)
    used, where = np.unique(d_of, return_inverse=True)
    lengths = (np.asarray(docs[used]) != pad_id).sum(axis=1)[where]
    order = np.argsort(lengths, kind="stable")
    fn = jax.jit(score_fn)
    out = np.zeros(len(d_of), np.float32)
    for start in tqdm(range(0, len(order), batch_size), desc=progress or "scoring pairs",
                      unit="batch", leave=False, dynamic_ncols=True, disable=not progress):
        rows = order[start:start + batch_size]
        q, d = np.asarray(queries[q_of[rows]]), np.asarray(docs[d_of[rows]])
        pad = batch_size - len(rows)
        if pad:
            q, d = (np.concatenate([a, np.repeat(a[-1:], pad, axis=0)]) for a in (q, d))
        scores = fn(variables, jnp.asarray(trim_padding(q, pad_id)),
                    jnp.asarray(trim_padding(d, pad_id)))
        out[rows] = np.asarray(scores, np.float32)[:len(rows)]
    return out


def score_candidates(score_fn: Callable, variables: Any, queries, corpus,
                     candidates_QxK: np.ndarray, *, pad_id: int, batch_size: int = 64,
                     progress: str = "") -> np.ndarray:
    """``[Q, K]``: each query's score with each of its candidate documents (corpus indices), by
    :func:`score_pairs`: ``Q K`` pair passes."""
    cand = np.asarray(candidates_QxK, np.int64)
    q_of = np.repeat(np.arange(cand.shape[0]), cand.shape[1])
    return score_pairs(score_fn, variables, queries, corpus, q_of, cand.reshape(-1),
                       pad_id=pad_id, batch_size=batch_size, progress=progress
                       ).reshape(cand.shape)


def reorder(candidates_QxK: np.ndarray, scores_QxK: np.ndarray) -> np.ndarray:
    """Each row of candidates sorted by score, best first (ties keep the first stage's order):
    the same documents, never one lost or added.

    Time ``O(Q K log K)``.

    >>> reorder(np.asarray([[7, 3, 5]]), np.asarray([[0.1, 0.9, 0.1]])).tolist()
    [[3, 7, 5]]
    """
    order = np.argsort(-np.asarray(scores_QxK), axis=1, kind="stable")
    return np.take_along_axis(np.asarray(candidates_QxK), order, axis=1)


def check_rerank(depth: int, sets: Sequence) -> None:
    """A one-line ValueError for a depth deeper than a retrieval set's corpus, checked before
    anything trains or is encoded (the first stage is checked where runs are read:
    :func:`repr_jax.train.arms.check_arm`)."""
    for s in sets:
        if s.kind == "retrieval":
            _check_depth(depth, s)


def _check_depth(depth: int, s) -> None:
    room = len(s.corpus) - (s.exclude is not None)  # a query that is a document skips itself
    if depth > room:
        raise ValueError(f"eval.rerank.depth={depth} is larger than {s.name}'s corpus of "
                         f"{len(s.corpus)} documents: use at most {room}")


def first_stage_candidates(first_stage: str | Callable, s, depth: int) -> np.ndarray:
    """``[Q, depth]`` corpus indices of set ``s``'s queries: BM25's over its texts, or
    ``first_stage(s, k) -> [Q, k]`` (a trained run's top-k:
    :func:`repr_jax.train.compare.run_candidates`). A query that is also a document
    (``s.exclude``) never gets itself."""
    _check_depth(depth, s)
    extra = int(s.exclude is not None)
    if first_stage == BM25:
        from repr_jax.eval.bm25 import BM25 as Index
        if s.texts is None:
            raise ValueError(f"eval.rerank.first_stage=bm25 needs {s.name}'s texts (a beir: set "
                             f"or wordnet_retrieval)")
        idx, _ = Index(s.texts[1]).topk(s.texts[0], depth + extra)
    else:
        idx = np.asarray(first_stage(s, depth + extra))
    return without(idx, s.exclude) if extra else idx


@config
class RerankOptions:
    """``eval.rerank.*``: the options of :class:`Rerank`."""
    first_stage: str = static(BM25, doc="the candidates: bm25, a text bi-encoder run's directory "
                                        "(biencoder, clip, siglip: its top-k by exact search), "
                                        "or minilm / a sentence-transformers folder")
    depth: int = static(50, ">0", "candidates reranked per query")
    metrics: tuple[str, ...] = static(("ndcg@10", "recall@10", "mrr@10"),
                                      doc="metric@k with k <= depth")
    batch_size: int = static(64, ">0", "query-document pairs scored together")

    def _validate(self):
        deepest = max(metric_cutoffs(self.metrics, option="eval.rerank.metrics"))
        if deepest > self.depth:
            raise ConfigError(f"eval.rerank.metrics: a cut-off of {deepest} is deeper than "
                              f"eval.rerank.depth={self.depth} (reranking cannot reach past it)")


class Rerank(Evaluator):
    """Second-stage reranking of each text retrieval set (a ``beir:`` set, wordnet_retrieval) by
    a method that scores pairs (cross_encoder): each metric for the first stage, reranked, and
    the paired gain.

    Cost: the first stage (BM25 ``O(Q N)``, or a run's embedding and search), then ``Q x depth``
    pair passes (:func:`score_candidates`)."""

    name = "rerank"
    options = RerankOptions

    def __init__(self, embedder, *, first_stage: str | Callable = BM25, depth: int = 50,
                 metrics: Sequence[str] = ("ndcg@10", "recall@10", "mrr@10"),
                 batch_size: int = 64, bootstrap: int = 1000):
        super().__init__(embedder)
        self.first_stage, self.depth, self.batch_size = first_stage, depth, batch_size
        self.metrics, self.bootstrap = tuple(metrics), bootstrap
        RerankOptions(depth=depth, metrics=self.metrics)  # the section's checks, for callers too
        self.ks = list(metric_cutoffs(self.metrics, option="eval.rerank.metrics"))

    def run(self, variables):
        score_fn = getattr(self.embedder, "score_fn", None)
        if score_fn is None:
            return  # a representation that does not score pairs (a reference row) has no rerank
        for s in self.embedder.sets("retrieval"):
            if self.first_stage == BM25 and s.texts is None:
                continue
            cand = first_stage_candidates(self.first_stage, s, self.depth)
            before = topk_metrics(cand, s.qrels, self.ks, per_query=True)
            scores = score_candidates(score_fn, variables, s.queries, s.corpus, cand,
                                      pad_id=self.embedder.pad_id, batch_size=self.batch_size,
                                      progress=self.embedder.progress and f"rerank {s.name}")
            after = topk_metrics(reorder(cand, scores), s.qrels, self.ks, per_query=True)
            for m in self.metrics:
                yield f"{s.name}/first_stage/{m}", with_ci(before[m], bootstrap=self.bootstrap)
                yield f"{s.name}/reranked/{m}", with_ci(after[m], bootstrap=self.bootstrap)
                yield f"{s.name}/gain/{m}", _gain(after[m], before[m], self.bootstrap)


def _gain(after, before, bootstrap: int) -> float:
    """The mean paired difference, with its bootstrap interval when ``bootstrap`` > 0."""
    if not bootstrap:
        return float(np.mean(np.asarray(after) - np.asarray(before)))
    test = paired_bootstrap(after, before, num_resamples=bootstrap)
    return Estimate(test["difference"], test["low"], test["high"])
