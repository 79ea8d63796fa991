"""Weighted k-nearest-neighbour classifier on frozen features (InstDisc / solo-learn convention)."""

from __future__ import annotations

import functools
from typing import Iterator

import jax
import jax.numpy as jnp

from repr_jax.eval.base import Embedder, Evaluator


def _normalize(x):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@functools.partial(jax.jit, static_argnames=("k", "num_classes"))
def _knn_predict(train_NxD, train_y_N, query_QxD, *, k: int, temperature, num_classes: int):
    sim_QxN = query_QxD @ train_NxD.T
    top_sim_QxK, top_idx_QxK = jax.lax.top_k(sim_QxN, k)
    weights_QxK = jnp.exp(top_sim_QxK / temperature)
    votes_QxC = jnp.einsum("qk,qkc->qc", weights_QxK,
                           jax.nn.one_hot(train_y_N[top_idx_QxK], num_classes))
    return jnp.argmax(votes_QxC, axis=-1)


def knn_classifier(train_x, train_y, test_x, test_y, *, k: int = 20, temperature: float = 0.07,
                   num_classes: int | None = None, chunk_size: int = 1024) -> dict[str, float]:
    """Accuracy of a cosine-similarity kNN with votes weighted by ``exp(sim / temperature)``.

    Each test point takes its ``k`` most similar training points (ties by ``lax.top_k`` order) and
    predicts the class with the largest summed weight (Wu et al. 2018; solo-learn's ``WeightedKNN``).
    Queries are processed in chunks of ``chunk_size`` so memory is ``O(chunk_size * N)``.
    Returns ``{"accuracy"}``.
    """
    train_x = _normalize(jnp.asarray(train_x, jnp.float32))
    test_x = _normalize(jnp.asarray(test_x, jnp.float32))
    train_y, test_y = jnp.asarray(train_y), jnp.asarray(test_y)
    k = min(k, len(train_y))
    num_classes = num_classes or int(max(train_y.max(), test_y.max())) + 1
    preds = [_knn_predict(train_x, train_y, test_x[i:i + chunk_size], k=k,
                          temperature=temperature, num_classes=num_classes)
             for i in range(0, len(test_y), chunk_size)]
    return {"accuracy": float(jnp.mean(jnp.concatenate(preds) == test_y))}


class KNN(Evaluator):
    """kNN classifier with the ``train`` split as memory bank, scored on ``test``."""

    name = "knn"

    def __init__(self, embedder: Embedder, *, k: int = 20, temperature: float = 0.07):
        super().__init__(embedder)
        self.k, self.temperature = k, temperature

    def run(self, variables) -> Iterator[tuple[str, float]]:
        f = self.embedder(variables)
        yield "accuracy", knn_classifier(*f["train"], *f["test"], k=self.k,
                                         temperature=self.temperature)["accuracy"]
