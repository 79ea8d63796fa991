"""Weighted k-nearest-neighbour classifier on frozen features (InstDisc / solo-learn convention)."""

from __future__ import annotations

import functools
from typing import Any, Iterator

import jax
import jax.numpy as jnp

from repr_jax.config import config, static
from repr_jax.eval.base import Embedder, Evaluator
from repr_jax.eval.retrieval import SIMILARITIES, retrieve, similarity_matrix
from repr_jax.eval.stats import with_ci


TILE = 1 << 25  # query x train scores held at once; larger banks go through ``retrieve``


@functools.partial(jax.jit, static_argnames=("k", "num_classes", "similarity"))
def _knn_predict(train_NxD, train_y_N, query_QxD, *, k: int, temperature, num_classes: int,
                 similarity: str):
    sim_QxN = similarity_matrix(query_QxD, train_NxD, similarity)
    top_sim_QxK, top_idx_QxK = jax.lax.top_k(sim_QxN, k)
    return _vote(top_sim_QxK, top_idx_QxK, train_y_N, temperature=temperature,
                 num_classes=num_classes)


@functools.partial(jax.jit, static_argnames=("num_classes",))
def _vote(top_sim_QxK, top_idx_QxK, train_y_N, *, temperature, num_classes: int):
    weights_QxK = jnp.exp(top_sim_QxK / temperature)
    votes_QxC = jnp.einsum("qk,qkc->qc", weights_QxK,
                           jax.nn.one_hot(train_y_N[top_idx_QxK], num_classes))
    return jnp.argmax(votes_QxC, axis=-1)


def knn_classifier(train_x, train_y, test_x, test_y, *, k: int = 20, temperature: float = 0.07,
                   similarity: str = "cosine", num_classes: int | None = None,
                   chunk_size: int = 1024, per_example: bool = False) -> dict[str, Any]:
    """Accuracy of a kNN classifier with votes weighted by ``exp(sim / temperature)``.

    Each test point takes its ``k`` most similar training points (``similarity``: ``cosine`` (the
    default), ``dot`` or ``l2`` = negative squared distance; ties by ``lax.top_k`` order) and predicts
    the class with the largest summed weight (Wu et al. 2018; solo-learn's ``WeightedKNN``).
    Time ``O(Q N D)``. Queries go in chunks of ``chunk_size`` against the whole bank while a
    chunk's scores fit ``TILE`` (memory ``O(chunk_size * N)``); larger banks are searched with
    :func:`repr_jax.eval.retrieve` (queries and bank tiled, a running top-k: memory
    ``O(N D + query_chunk * (corpus_chunk + N / 64))``; the same neighbours).
    Returns ``{"accuracy"}`` (and ``"correct"``, ``[N_test]`` 0/1, with ``per_example``).
    """
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r}; choose from {SIMILARITIES}")
    train_x = jnp.asarray(train_x, jnp.float32)
    test_x = jnp.asarray(test_x, jnp.float32)
    train_y, test_y = jnp.asarray(train_y), jnp.asarray(test_y)
    k = min(k, len(train_y))
    num_classes = num_classes or int(max(train_y.max(), test_y.max())) + 1
    if min(chunk_size, len(test_y)) * len(train_y) <= TILE:
        preds = jnp.concatenate([
            _knn_predict(train_x, train_y, test_x[i:i + chunk_size], k=k,
                         temperature=temperature, num_classes=num_classes, similarity=similarity)
            for i in range(0, len(test_y), chunk_size)])
    else:
        top_sim, top_idx = retrieve(test_x, train_x, k=k, similarity=similarity)
        preds = _vote(top_sim, top_idx, train_y, temperature=temperature, num_classes=num_classes)
    correct = (preds == test_y).astype(jnp.float32)
    out = {"accuracy": float(correct.mean())}
    if per_example:
        out["correct"] = correct
    return out


@config
class KNNOptions:
    """``eval.knn.*``: the options of :class:`KNN` (its keyword arguments)."""
    k: int = static(20, ">0")
    temperature: float = static(0.07, ">0", "weights neighbours' votes by exp(sim / T)")
    similarity: str = static("cosine", SIMILARITIES)


class KNN(Evaluator):
    """kNN classifier with the ``train`` split as memory bank, scored on ``test``.

    Cost (Q test rows, N train rows, D dims): time ``O(Q N D)``, memory ``O(N D + tile)``
    (:func:`knn_classifier`)."""

    name = "knn"
    options = KNNOptions

    def __init__(self, embedder: Embedder, *, k: int = 20, temperature: float = 0.07,
                 similarity: str = "cosine", bootstrap: int = 1000):
        super().__init__(embedder)
        self.k, self.temperature, self.similarity = k, temperature, similarity
        self.bootstrap = bootstrap

    def run(self, variables) -> Iterator[tuple[str, float]]:
        f = self.embedder(variables)
        out = knn_classifier(*f["train"], *f["test"], k=self.k, temperature=self.temperature,
                             similarity=self.similarity, per_example=True)
        yield "accuracy", with_ci(out["correct"], bootstrap=self.bootstrap)
