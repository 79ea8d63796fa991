"""BM25 through ``bm25s``: the lexical row that starts every text retrieval table.

Lucene's scoring (Robertson & Zaragoza 2009, as Pyserini's BEIR baselines): a query's score for
document ``d`` is ``sum_t idf(t) tf(t, d) / (tf(t, d) + k1 (1 - b + b |d| / avgdl))`` over the
query's words, ``idf(t) = log(1 + (N - df(t) + 0.5) / (df(t) + 0.5))``. Texts are split into
lowercased words without English stopwords (bm25s' tokenizer, no stemmer), never into a model's
word pieces: the row belongs to the collection and is the same for every run.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from repr_jax.eval.retrieval import topk_metrics, without
from repr_jax.eval.stats import with_ci

K1, B = 0.9, 0.4  # Pyserini's BEIR defaults ("BM25 flat")
NAME = f"BM25 (k1={K1}, b={B})"


def _bm25s():
    """The ``bm25s`` module, its logger left to the application: bm25s sets its own logger to
    DEBUG when imported, so once anything gives the root logger a handler (absl does, the first
    time orbax logs through it before absl's own handler is installed) every index it builds
    printed ``DEBUG:bm25s:Building index from tokens``. Reset to NOTSET, its records follow the
    root logger's level (WARNING unless the application asks for more)."""
    import logging

    import bm25s
    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return bm25s


def words(texts: Sequence[str]) -> list[list[str]]:
    """Each text's terms: lowercased words, English stopwords left out."""
    bm25s = _bm25s()
    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class BM25:
    """A corpus indexed for BM25 (``k1``, ``b``). Cost: indexing ``O(W)`` time and memory for the
    corpus's W words; :meth:`topk` ``O(Q (q P + N))`` for q words a query, P postings a word, N
    documents (a dense score row each); :meth:`pair_scores` ``O(P_pairs N)``."""

    def __init__(self, corpus: Sequence[str], *, k1: float = K1, b: float = B):
        bm25s = _bm25s()
        if not len(corpus):
            raise ValueError("BM25 over an empty corpus")
        self.size = len(corpus)
        self.retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        self.retriever.index(words(corpus), show_progress=False)

    def topk(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, scores)`` ``[Q, min(k, N)]`` of each query's best documents."""
        idx, scores = self.retriever.retrieve(words(queries), k=min(k, self.size),
                                              show_progress=False)
        return np.asarray(idx, np.int64), np.asarray(scores, np.float32)

    def pair_scores(self, queries: Sequence[str], docs: Sequence[int]) -> np.ndarray:
        """``[P]``: query ``i``'s score for corpus document ``docs[i]``."""
        return np.asarray([self.retriever.get_scores(q)[d] if q else 0.0
                           for q, d in zip(words(queries), docs)], np.float32)


def bm25_topk(queries: Sequence[str], corpus: Sequence[str], *, k: int, k1: float = K1,
              b: float = B) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, scores)`` ``[Q, k]`` of each query's best documents (:class:`BM25`)."""
    return BM25(corpus, k1=k1, b=b).topk(queries, k)


def bm25_per_query(sets: Sequence, *, ks: Sequence[int]
                   ) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """``("set/", {metric: [Q] per-query values})`` of BM25 on every retrieval set that carries
    its texts (``texts``: queries', corpus'), as the retrieval evaluator names them (a query that
    is also a document does not retrieve itself)."""
    for s in sets:
        if getattr(s, "texts", None) is None:
            continue
        exclude = getattr(s, "exclude", None)
        queries, corpus = s.texts
        idx, _ = bm25_topk(queries, corpus, k=max(ks) + int(exclude is not None))
        if exclude is not None:
            idx = without(idx, exclude)
        yield f"{s.name}/", topk_metrics(idx, s.qrels, ks, per_query=True)


def bm25_metrics(sets: Sequence, *, ks: Sequence[int], metrics: Sequence[str],
                 bootstrap: int = 1000) -> Iterator[tuple[str, float]]:
    """``(set/metric, value)`` of :func:`bm25_per_query`, with bootstrap intervals."""
    for prefix, per_q in bm25_per_query(sets, ks=ks):
        for m in metrics:
            yield prefix + m, with_ci(per_q[m], bootstrap=bootstrap)
