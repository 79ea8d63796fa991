"""Semantic similarity: correlation between embedding similarities and human (or known) scores.

Spearman is Pearson on average ranks (ties share the mean of their ranks), as in
``scipy.stats.spearmanr``; both are checked against scipy in ``tests/test_eval_metrics.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from repr_jax.config import config, static
from repr_jax.eval.base import Evaluator
from repr_jax.eval.retrieval import SIMILARITIES, normalize_rows
from repr_jax.eval.stats import with_ci


def pair_similarity(a_PxD: jax.Array, b_PxD: jax.Array, similarity: str = "cosine") -> jax.Array:
    """Row-wise ``cosine``, ``dot`` or ``l2`` (negative Euclidean distance) similarity ``[P]``."""
    if similarity == "cosine":
        return jnp.sum(normalize_rows(a_PxD) * normalize_rows(b_PxD), -1)
    if similarity == "dot":
        return jnp.sum(a_PxD * b_PxD, -1)
    if similarity == "l2":
        return -jnp.linalg.norm(a_PxD - b_PxD, axis=-1)
    raise ValueError(f"unknown similarity {similarity!r}; choose from {SIMILARITIES}")


def rankdata(x_N: jax.Array) -> jax.Array:
    """1-based ranks with ties averaged (``scipy.stats.rankdata(method="average")``)."""
    s = jnp.sort(x_N)
    left = jnp.searchsorted(s, x_N, side="left")
    right = jnp.searchsorted(s, x_N, side="right")
    return (left + right + 1) / 2.0


def pearson(x_N: jax.Array, y_N: jax.Array) -> jax.Array:
    x, y = x_N - x_N.mean(), y_N - y_N.mean()
    return jnp.sum(x * y) / jnp.sqrt(jnp.sum(x * x) * jnp.sum(y * y))


def spearman(x_N: jax.Array, y_N: jax.Array) -> jax.Array:
    return pearson(rankdata(x_N), rankdata(y_N))


def sts_correlation(emb1, emb2, gold, similarity: str = "cosine") -> dict[str, float]:
    """Spearman and Pearson correlation between ``similarity(emb1[i], emb2[i])`` and ``gold[i]``.

    >>> e = jnp.asarray([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    >>> sts_correlation(e, jnp.asarray([[1.0, 0.0]] * 3), jnp.asarray([5.0, 3.0, 0.0]))["spearman"]
    1.0
    """
    emb1 = jnp.asarray(emb1, jnp.float32)
    emb2 = jnp.asarray(emb2, jnp.float32)
    gold = jnp.asarray(gold, jnp.float32)
    if emb1.shape != emb2.shape or emb1.ndim != 2 or gold.shape != emb1.shape[:1]:
        raise ValueError(f"sts_correlation expects emb1, emb2 [P, D] and gold [P]; got "
                         f"{emb1.shape}, {emb2.shape}, {gold.shape}")
    sim = pair_similarity(emb1, emb2, similarity)
    return {"spearman": float(spearman(sim, gold)), "pearson": float(pearson(sim, gold))}


@config
class STSOptions:
    """``eval.sts.*``: the options of :class:`STS` (its keyword arguments)."""
    similarity: str = static("cosine", SIMILARITIES)


class STS(Evaluator):
    """Spearman and Pearson correlation on every similarity evaluation set, with bootstrap intervals
    over rated pairs.

    Cost (P pairs, D dims): time ``O(P D + R P log P)`` with R resamples, memory ``O(P D)``."""

    name = "sts"
    options = STSOptions

    def __init__(self, embedder, *, similarity: str = "cosine", bootstrap: int = 1000):
        super().__init__(embedder)
        self.similarity, self.bootstrap = similarity, bootstrap

    def run(self, variables):
        for s in self.embedder.sets("similarity"):
            emb = self.embedder.embed(variables, s.items)
            pairs = jnp.asarray(s.pairs)
            sim = pair_similarity(emb[pairs[:, 0]], emb[pairs[:, 1]], self.similarity)
            gold = jnp.asarray(s.gold, jnp.float32)
            for name, fn in (("spearman", spearman), ("pearson", pearson)):
                yield f"{s.name}/{name}", with_ci((sim, gold), fn, bootstrap=self.bootstrap)
