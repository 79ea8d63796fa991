"""Quantised retrieval: int8 and binary embeddings, optional float rescoring of a shortlist.

``int8`` follows faiss's ``ScalarQuantizer(QT_8bit)``: each dimension's ``[min, max]`` range, trained
on the corpus, is mapped onto 256 buckets (stored as codes -128..127, as sentence-transformers'
``quantize_embeddings(precision="int8")``), and the float query is scored against the *decoded* corpus
vectors (asymmetric distance). Scoring raw integer codes instead centres and rescales every dimension,
which on non-negative (ReLU) features cost half the nDCG in our runs. ``binary`` keeps the sign bit
(packed, 8 dimensions per byte) of both query and corpus and scores by ``D - 2 * hamming`` (the inner
product of the +-1 vectors, as sentence-transformers' ``ubinary`` search). For cosine retrieval the vectors are
L2-normalised before quantising. ``rescore_multiplier=m`` shortlists ``m * k`` documents with the
quantised scores and reorders them with float32 query-document scores (the float corpus read back
from slower storage for the shortlist only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from repr_jax.config import config, static
from repr_jax.eval.base import Evaluator
from repr_jax.eval.retrieval import (SIMILARITIES, normalize_rows, metric_cutoffs, rerank,
                                     retrieval_tasks, retrieve, topk_metrics, without)
from repr_jax.eval.stats import with_ci

PRECISIONS = ("float32", "int8", "binary")


def bytes_per_vector(precision: str, dim: int) -> int:
    """Storage of one ``dim``-dimensional embedding (int8 calibration ranges are per corpus, not per
    vector, and are not counted)."""
    return {"float32": 4 * dim, "int8": dim, "binary": -(-dim // 8)}[precision]


def int8_calibration(corpus_NxD) -> tuple[jax.Array, jax.Array]:
    """Per-dimension ``(min, bucket width)`` (each ``[1, D]``) from the corpus."""
    lo, hi = jnp.min(corpus_NxD, 0, keepdims=True), jnp.max(corpus_NxD, 0, keepdims=True)
    return lo, jnp.maximum(hi - lo, 1e-12) / 255.0


def quantize_int8(x_NxD, calibration) -> jax.Array:
    lo, width = calibration
    return jnp.clip(jnp.round((x_NxD - lo) / width) - 128, -128, 127).astype(jnp.int8)


def dequantize_int8(codes_NxD, calibration) -> jax.Array:
    lo, width = calibration
    return lo + (codes_NxD.astype(jnp.float32) + 128) * width


def quantize_binary(x_NxD) -> jax.Array:
    """Sign bits packed 8 per byte: ``[N, ceil(D / 8)] uint8``."""
    return jnp.packbits(x_NxD > 0, axis=-1)


def unpack_binary(packed_NxB, dim: int) -> jax.Array:
    """Packed sign bits back to +-1 float vectors ``[N, dim]``."""
    return jnp.unpackbits(packed_NxB, axis=-1, count=dim).astype(jnp.float32) * 2.0 - 1.0


def quantized_search(queries, corpus, *, precision: str = "int8", k: int = 10,
                     similarity: str = "cosine", rescore_multiplier: int = 0
                     ) -> tuple[jax.Array, jax.Array]:
    """Top-``k`` ``(scores, indices)`` with quantised embeddings (see the module docstring).

    >>> q = jnp.asarray([[1.0, -1.0, 0.5]]); c = jnp.asarray([[1.0, -1.0, 1.0], [-1.0, 1.0, 0.0]])
    >>> quantized_search(q, c, precision="binary", k=1)[1].tolist()
    [[0]]
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose from {PRECISIONS}")
    queries = jnp.asarray(queries, jnp.float32)
    corpus = jnp.asarray(corpus, jnp.float32)
    if similarity == "cosine":
        queries, corpus, float_sim = normalize_rows(queries), normalize_rows(corpus), "dot"
    else:
        float_sim = similarity
    if precision == "float32":
        return retrieve(queries, corpus, k=k, similarity=float_sim)
    short_k = min(max(k, k * rescore_multiplier), corpus.shape[0])
    if precision == "int8":
        cal = int8_calibration(corpus)
        q_codes = queries  # asymmetric: float query, decoded corpus
        c_codes = dequantize_int8(quantize_int8(corpus, cal), cal)
    else:
        d = corpus.shape[1]
        q_codes = unpack_binary(quantize_binary(queries), d)
        c_codes = unpack_binary(quantize_binary(corpus), d)
    scores, idx = retrieve(q_codes, c_codes, k=short_k,
                           similarity="dot" if precision == "binary" else float_sim)
    if not rescore_multiplier:
        return scores[:, :k], idx[:, :k]
    return rerank(queries, corpus, idx, k=k, similarity=float_sim)  # float scores, shortlist


@config
class QuantizationOptions:
    """``eval.quantization.*``: the options of :class:`Quantization` (its keyword arguments)."""
    similarity: str = static("cosine", SIMILARITIES)
    max_queries: int = static(2000, ">0", "retrieval over the test pairs: first N pairs")


class Quantization(Evaluator):
    """Retrieval quality against storage: every retrieval task at float32, int8, binary and binary
    with a float-rescored shortlist; yields ``{precision}/{metric}`` and ``{precision}/bytes``.

    Cost: four searches, time ``O(Q N D)`` each, memory ``O(N D)``."""

    name = "quantization"
    options = QuantizationOptions

    def __init__(self, embedder, *, metric: str = "ndcg@10", rescore_multiplier: int = 4,
                 similarity: str = "cosine", max_queries: int = 2000, bootstrap: int = 1000):
        super().__init__(embedder)
        self.metric, self.rescore, self.similarity = metric, rescore_multiplier, similarity
        self.max_queries, self.bootstrap = max_queries, bootstrap
        self.k = metric_cutoffs(metric, option="metric")[0]

    def settings(self):
        yield "float32", "float32", 0
        yield "int8", "int8", 0
        yield "binary", "binary", 0
        if self.rescore:
            yield f"binary+rescore{self.rescore}", "binary", self.rescore

    def run(self, variables):
        for prefix, q, c, qrels, exclude in retrieval_tasks(self.embedder, variables,
                                                            max_queries=self.max_queries):
            for label, precision, rescore in self.settings():
                _, idx = quantized_search(q, c, precision=precision,
                                          k=self.k + (exclude is not None),
                                          similarity=self.similarity, rescore_multiplier=rescore)
                if exclude is not None:  # a query that is also a document skips itself
                    idx = without(idx, exclude)
                per_q = topk_metrics(idx, qrels, (self.k,), per_query=True)
                yield f"{prefix}{label}/{self.metric}", with_ci(per_q[self.metric],
                                                                bootstrap=self.bootstrap)
                yield f"{prefix}{label}/bytes", float(bytes_per_vector(precision, q.shape[1]))
