"""k-means (k-means++ initialisation) in JAX, and the information-theoretic clustering scores.

``nmi``, ``ami`` and ``v_measure`` follow scikit-learn's definitions (natural log, arithmetic-mean
normalisation, the hypergeometric expected mutual information of Vinh et al. 2010 for AMI) and match
``sklearn.metrics`` to 1e-6. The contingency table is counted on device; the scores are then
float64 arithmetic on that small ``[classes, clusters]`` table (float32 log-factorials of ``N ~ 1e4``
would lose the 1e-6).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import config, static
from repr_jax.eval.base import Evaluator


@functools.partial(jax.jit, static_argnames=("k", "max_iters"))
def _kmeans_one(key, x_NxD, *, k: int, max_iters: int, tol):
    n = x_NxD.shape[0]
    sq_N = jnp.sum(x_NxD ** 2, -1)

    def sq_dist(c_KxD):
        return jnp.maximum(sq_N[:, None] - 2 * x_NxD @ c_KxD.T + jnp.sum(c_KxD ** 2, -1)[None], 0)

    # k-means++ (Arthur & Vassilvitskii 2007): each new centre drawn with probability ~ D(x)^2.
    k0, key = jax.random.split(key)
    first = jax.random.randint(k0, (), 0, n)
    cent = jnp.zeros((k, x_NxD.shape[1]), x_NxD.dtype).at[0].set(x_NxD[first])
    d2 = jnp.sum((x_NxD - x_NxD[first][None, :]) ** 2, -1)

    def add_centre(i, carry):
        cent, d2, key = carry
        key, sub = jax.random.split(key)
        p = d2 / jnp.maximum(d2.sum(), 1e-30)
        j = jax.random.choice(sub, n, p=jnp.where(d2.sum() > 0, p, 1.0 / n))
        cent = cent.at[i].set(x_NxD[j])
        return cent, jnp.minimum(d2, jnp.sum((x_NxD - x_NxD[j][None, :]) ** 2, -1)), key

    cent, _, _ = jax.lax.fori_loop(1, k, add_centre, (cent, d2, key))

    # Lloyd iterations until the centres stop moving (or max_iters); an empty cluster keeps its centre.
    def lloyd(carry):
        cent, _, it = carry
        assign = jnp.argmin(sq_dist(cent), axis=1)
        onehot_NxK = jax.nn.one_hot(assign, k, dtype=x_NxD.dtype)
        counts = onehot_NxK.sum(0)
        new = jnp.where(counts[:, None] > 0, onehot_NxK.T @ x_NxD / jnp.maximum(counts, 1)[:, None],
                        cent)
        return new, jnp.sum((new - cent) ** 2), it + 1

    def not_done(carry):
        _, shift, it = carry
        return (it < max_iters) & (shift > tol)

    cent, _, iters = jax.lax.while_loop(not_done, lloyd, (cent, jnp.inf, 0))
    d = sq_dist(cent)
    return cent, jnp.argmin(d, axis=1), jnp.sum(jnp.min(d, axis=1)), iters


def kmeans(x, k: int, *, seed: int = 0, num_inits: int = 3, max_iters: int = 300,
           tol: float = 1e-6) -> dict[str, jax.Array]:
    """k-means with k-means++ seeding; the best of ``num_inits`` restarts by inertia.

    ``tol`` is on the squared centre shift, relative to the mean per-feature variance (as sklearn's).
    Returns ``{"centroids" [k, D], "labels" [N], "inertia", "iterations"}``.
    """
    x = jnp.asarray(x, jnp.float32)
    if x.ndim != 2 or not 0 < k <= x.shape[0]:
        raise ValueError(f"kmeans needs x [N, D] with 0 < k <= N; got {x.shape}, k={k}")
    abs_tol = tol * jnp.mean(jnp.var(x, axis=0))
    runs = [_kmeans_one(key, x, k=k, max_iters=max_iters, tol=abs_tol)
            for key in jax.random.split(jax.random.PRNGKey(seed), num_inits)]
    best = min(range(num_inits), key=lambda i: float(runs[i][2]))
    cent, labels, inertia, iters = runs[best]
    return {"centroids": cent, "labels": labels, "inertia": inertia, "iterations": iters}


# --------------------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------------------

def contingency(labels_true, labels_pred) -> np.ndarray:
    """``[classes, clusters]`` counts (only the labels that occur): one ``bincount`` of the pair
    codes, time ``O(N + K_t K_p)``, never an ``N x K`` one-hot."""
    t = np.unique(np.asarray(labels_true), return_inverse=True)[1].ravel()
    p = np.unique(np.asarray(labels_pred), return_inverse=True)[1].ravel()
    if t.shape != p.shape:
        raise ValueError(f"labelings differ in length: {t.shape[0]} vs {p.shape[0]}")
    if not t.size:
        return np.zeros((0, 0))
    kt, kp = int(t.max()) + 1, int(p.max()) + 1
    return np.bincount(t.astype(np.int64) * kp + p, minlength=kt * kp).reshape(
        kt, kp).astype(np.float64)


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-np.sum(p * np.log(p)))


def _mutual_info(table: np.ndarray) -> float:
    n = table.sum()
    a, b = table.sum(1, keepdims=True), table.sum(0, keepdims=True)
    nz = table > 0
    return float(max(np.sum(table[nz] / n * np.log(n * table[nz] / (a @ b)[nz])), 0.0))


def _log_factorial(x: np.ndarray) -> np.ndarray:
    from math import lgamma
    return np.vectorize(lambda v: lgamma(v + 1.0), otypes=[np.float64])(x)


def _expected_mutual_info(table: np.ndarray) -> float:
    """E[MI] under the hypergeometric model of random labelings with the table's marginals
    (sklearn's ``expected_mutual_information``). The sum over class x cluster pairs runs over the
    distinct marginal values, vectorised over the clusters': time ``O(U_a * sum_b min(a, b))``
    for ``U_a`` distinct class sizes, not a Python loop over ``K_t K_p`` pairs."""
    n = int(table.sum())
    a = table.sum(1).astype(np.int64)
    b = table.sum(0).astype(np.int64)
    ua, ca = np.unique(a, return_counts=True)
    ub, cb = np.unique(b, return_counts=True)
    lf = _log_factorial(np.arange(n + 1))
    emi = 0.0
    for ai, weight in zip(ua, ca):
        lo, hi = np.maximum(1, ai + ub - n), np.minimum(ai, ub)  # [B] each
        width = int(max(0, (hi - lo).max() + 1))
        if width == 0:
            continue
        v = lo[:, None] + np.arange(width)[None, :]  # [B, W] the cell counts each pair can have
        valid = v <= hi[:, None]
        bj = ub[:, None]

        def lfi(x):  # masked cells may index outside [0, n]: clipped, then zeroed below
            return lf[np.clip(x, 0, n)]
        term = v / n * (np.log(n * np.maximum(v, 1)) - np.log(ai * bj))
        log_p = (lf[ai] + lfi(bj) + lf[n - ai] + lfi(n - bj) - lf[n] - lfi(v) - lfi(ai - v)
                 - lfi(bj - v) - lfi(n - ai - bj + v))
        emi += float(weight * np.sum(cb[:, None] * np.where(valid, term * np.exp(log_p), 0.0)))
    return emi


def nmi(labels_true, labels_pred) -> float:
    """Normalised mutual information, arithmetic-mean normalisation (sklearn's default)."""
    table = contingency(labels_true, labels_pred)
    h_t, h_p = _entropy(table.sum(1)), _entropy(table.sum(0))
    if h_t == 0 and h_p == 0:
        return 1.0
    return _mutual_info(table) / max((h_t + h_p) / 2, np.finfo(np.float64).eps)


def ami(labels_true, labels_pred) -> float:
    """Adjusted mutual information (arithmetic-mean normalisation): 0 in expectation for random
    labelings, 1 for identical ones."""
    table = contingency(labels_true, labels_pred)
    if table.shape[0] == table.shape[1] == 1 or table.shape[0] == table.shape[1] == 0:
        return 1.0
    mi = _mutual_info(table)
    emi = _expected_mutual_info(table)
    normalizer = (_entropy(table.sum(1)) + _entropy(table.sum(0))) / 2
    denom = normalizer - emi
    eps = np.finfo(np.float64).eps
    denom = min(denom, -eps) if denom < 0 else max(denom, eps)
    return (mi - emi) / denom


def v_measure(labels_true, labels_pred, beta: float = 1.0) -> float:
    """Harmonic mean of homogeneity and completeness (Rosenberg & Hirschberg 2007)."""
    table = contingency(labels_true, labels_pred)
    mi = _mutual_info(table)
    h_t, h_p = _entropy(table.sum(1)), _entropy(table.sum(0))
    hom = mi / h_t if h_t else 1.0
    com = mi / h_p if h_p else 1.0
    return (1 + beta) * hom * com / (beta * hom + com) if hom + com else 0.0


@config
class ClusteringOptions:
    """``eval.clustering.*``: the options of :class:`Clustering` (its keyword arguments)."""
    seed: int = static(0, ">=0", "k-means initialisations")


class Clustering(Evaluator):
    """k-means on the ``test`` features with k = the number of classes, scored against the labels.

    Cost (N test rows, D dims, K classes): time ``O(inits x iters x N K D)``, memory
    ``O(N D + N K)``; the scores from a ``bincount`` contingency table, ``O(N + K^2)``."""

    name = "clustering"
    options = ClusteringOptions

    def __init__(self, embedder, *, num_inits: int = 3, seed: int = 0, normalize: bool = True):
        super().__init__(embedder)
        self.num_inits, self.seed, self.normalize = num_inits, seed, normalize

    def run(self, variables):
        x, y = self.embedder(variables)["test"]
        if self.normalize:  # spherical features, as the cosine-based evaluators see them
            x = x / jnp.maximum(jnp.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        pred = kmeans(x, len(np.unique(np.asarray(y))), seed=self.seed,
                      num_inits=self.num_inits)["labels"]
        yield "nmi", nmi(y, pred)
        yield "ami", ami(y, pred)
        yield "v_measure", v_measure(y, pred)
