"""Representation geometry: how embeddings fill their space, independent of any label.

Each function takes embeddings ``[N, D]`` and returns a scalar; each is checked against a numpy
transcription of its paper's reference code in ``tests/test_eval_metrics.py``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import config, static
from repr_jax.eval.base import Evaluator
from repr_jax.eval.retrieval import normalize_rows


@jax.jit
def alignment(z1, z2, alpha: float = 2.0) -> jax.Array:
    """Mean ``||f(x) - f(x+)||^alpha`` of L2-normalised positive pairs (Wang & Isola 2020; lower is
    better aligned, in ``[0, 2^alpha]``). Time and memory ``O(N D)``."""
    z1 = normalize_rows(jnp.asarray(z1, jnp.float32))
    z2 = normalize_rows(jnp.asarray(z2, jnp.float32))
    return jnp.mean(jnp.linalg.norm(z1 - z2, axis=-1) ** alpha)


UNIFORMITY_BLOCK = 1024  # rows of the pair-distance tile above ``uniformity``'s exact path


def uniformity(z, t: float = 2.0) -> jax.Array:
    """``log mean_{i<j} exp(-t ||z_i - z_j||^2)`` of L2-normalised embeddings (Wang & Isola 2020;
    lower is more uniform). Time ``O(N^2 D)``; memory ``O(N^2)`` up to ``4 * UNIFORMITY_BLOCK``
    rows, above that ``O(UNIFORMITY_BLOCK * N)``: the pairs go a block of rows at a time into a
    running log-sum-exp (the same value to float rounding)."""
    z = jnp.asarray(z, jnp.float32)
    if z.shape[0] <= 4 * UNIFORMITY_BLOCK:
        return _uniformity_exact(z, t)
    return _uniformity_blocked(z, t, UNIFORMITY_BLOCK)


@jax.jit
def _uniformity_exact(z, t):
    z = normalize_rows(z)
    n = z.shape[0]
    sq_NxN = jnp.maximum(2.0 - 2.0 * z @ z.T, 0.0)
    iu = jnp.triu_indices(n, k=1)
    return jax.nn.logsumexp(-t * sq_NxN[iu]) - jnp.log(n * (n - 1) / 2)


@functools.partial(jax.jit, static_argnames=("block",))
def _uniformity_blocked(z, t, block: int):
    z = normalize_rows(z)
    n = z.shape[0]
    padded_PxD = jnp.pad(z, ((0, -n % block), (0, 0)))
    cols_N = jnp.arange(n)

    def rows(start):
        z_BxD = jax.lax.dynamic_slice_in_dim(padded_PxD, start, block)
        sq_BxN = jnp.maximum(2.0 - 2.0 * z_BxD @ z.T, 0.0)
        upper_BxN = cols_N[None, :] > (start + jnp.arange(block))[:, None]  # j > i; pad rows: none
        return jax.nn.logsumexp(jnp.where(upper_BxN, -t * sq_BxN, -jnp.inf))
    per_block = jax.lax.map(rows, jnp.arange(0, padded_PxD.shape[0], block))
    return jax.nn.logsumexp(per_block) - jnp.log(n * (n - 1) / 2)


QR_ABOVE = 8192  # a side longer than this goes through a QR first: the SVD would hold it squared


def effective_rank(z, eps: float = 1e-7) -> jax.Array:
    """RankMe (Garrido et al. 2023): ``exp(-sum p_k log p_k)`` with ``p_k = s_k / ||s||_1 + eps`` over
    the singular values ``s`` of the (uncentred) embedding matrix; between 1 and ``min(N, D)``.
    Time ``O(N D min(N, D))``, memory ``O(N D + min(N, D)^2)``: when the longer side exceeds
    ``QR_ABOVE``, a QR of it first and the SVD of the square ``R`` (the same singular values,
    backward stable; XLA's SVD of a 100,000 x 64 matrix asked for 40 GB, ``N^2``)."""
    z = jnp.asarray(z, jnp.float32)
    return _effective_rank(z, eps, max(z.shape) > QR_ABOVE)


@functools.partial(jax.jit, static_argnames=("qr_first",))
def _effective_rank(z, eps, qr_first: bool):
    if qr_first:
        z = jnp.linalg.qr(z.T if z.shape[0] < z.shape[1] else z, mode="r")
    s = jnp.linalg.svd(z, compute_uv=False)
    p = s / jnp.sum(s) + eps
    return jnp.exp(-jnp.sum(p * jnp.log(p)))


@jax.jit
def anisotropy(z) -> jax.Array:
    """Mean cosine similarity of two *different* random embeddings (Ethayarajh 2019), computed exactly
    over all ``N (N - 1)`` ordered pairs: ``(||sum_i u_i||^2 - N) / (N (N - 1))`` with ``u = z/||z||``.
    0 for isotropic embeddings, 1 when all point the same way. Time and memory ``O(N D)``."""
    u = normalize_rows(jnp.asarray(z, jnp.float32))
    n = u.shape[0]
    return (jnp.sum(jnp.sum(u, 0) ** 2) - n) / (n * (n - 1.0))  # a float: N^2 passes int32


def linear_cka(x, y) -> jax.Array:
    """Linear centred kernel alignment (Kornblith et al. 2019) between ``x [N, D1]`` and ``y [N, D2]``:
    ``||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)`` on column-centred features; 1 for representations
    equal up to rotation and isotropic scaling. When a side is wider than ``N`` it is computed from
    the double-centred ``N x N`` Gram matrices (:func:`linear_cka_gram`; the same value): time
    ``O(N D min(N, D))``, memory ``O(N D + min(N, D)^2)``, never ``D x D``."""
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"linear_cka needs the same examples; got {x.shape[0]} and {y.shape[0]}")
    if max(x.shape[1], y.shape[1]) > x.shape[0]:
        return linear_cka_gram(x @ x.T, y @ y.T)
    return _linear_cka_features(x, y)


@jax.jit
def _linear_cka_features(x, y):
    x, y = x - x.mean(0, keepdims=True), y - y.mean(0, keepdims=True)
    return (jnp.linalg.norm(y.T @ x) ** 2
            / (jnp.linalg.norm(x.T @ x) * jnp.linalg.norm(y.T @ y)))


@jax.jit
def linear_cka_gram(kx_NxN, ky_NxN) -> jax.Array:
    """Linear CKA from the (uncentred) Gram matrices ``X X^T`` and ``Y Y^T``: with ``H K H`` the
    double-centred Grams, ``<Hx, Hy>_F / (||Hx||_F ||Hy||_F)`` (centring the columns of ``X``
    double-centres ``X X^T``, and ``||X^T Y||_F^2 = <X X^T, Y Y^T>_F``). Time and memory
    ``O(N^2)``: Grams built in column blocks never hold the features whole."""
    def centred(k):
        mean_N = k.mean(0)
        return k - mean_N[None, :] - mean_N[:, None] + k.mean()
    kx, ky = centred(kx_NxN), centred(ky_NxN)
    return jnp.sum(kx * ky) / (jnp.linalg.norm(kx) * jnp.linalg.norm(ky))


def gram(x, block: int = 8192) -> jax.Array:
    """``x x^T`` (``[N, N]`` float32) of a host array ``x [N, ...]``, built from blocks of
    ``block`` flattened columns: memory ``O(N^2 + N * block)`` beside ``x``, time ``O(N^2 D)``."""
    x = np.asarray(x).reshape(len(x), -1)
    k = jnp.zeros((len(x), len(x)), jnp.float32)
    for start in range(0, x.shape[1], block):
        b = jnp.asarray(x[:, start:start + block], jnp.float32)
        k = k + b @ b.T
    return k


def coding_rate(z, eps: float = 0.5) -> jax.Array:
    """``R(Z) = 1/2 logdet(I + D / (N eps^2) Z^T Z)`` (nats), the rate of MCR² (Yu et al. 2020) and
    CRATE's compression term, for rows ``z [N, D]`` taken as given (normalise first for theirs).
    When ``N < D``, ``logdet(I_N + D / (N eps^2) Z Z^T)`` (Sylvester's identity; the same value):
    time ``O(N D min(N, D) + min(N, D)^3)``, memory ``O(N D + min(N, D)^2)``."""
    z = jnp.asarray(z, jnp.float32)
    return _coding_rate(z, eps, z.shape[0] < z.shape[1])


@functools.partial(jax.jit, static_argnames=("dual",))
def _coding_rate(z, eps, dual: bool):
    n, d = z.shape
    g = z @ z.T if dual else z.T @ z
    return 0.5 * jnp.linalg.slogdet(jnp.eye(g.shape[0]) + d / (n * eps ** 2) * g)[1]


@jax.jit
def feature_std(z) -> jax.Array:
    """Mean over dimensions of the std of L2-normalised embeddings: ``1/sqrt(D)`` for spread-out
    features, 0 for a collapsed representation (the collapse monitor of SimSiam, Chen & He 2021)."""
    return jnp.mean(jnp.std(normalize_rows(jnp.asarray(z, jnp.float32)), axis=0))


@config
class GeometryOptions:
    """``eval.geometry.*``: the options of :class:`Geometry` (its keyword arguments)."""
    max_examples: int = static(2000, ">0", "test examples the geometry is measured on")


class Geometry(Evaluator):
    """Label-free geometry of the ``test`` features (the first ``max_examples``): uniformity,
    effective rank, anisotropy, coding rate (of L2-normalised features), feature std; alignment of
    the test pairs when the data has them; linear CKA with the raw inputs when those are vectors.

    Cost on ``n = min(N, max_examples)`` rows of D dims (raw inputs of D_in): time
    ``O(n^2 D + n D min(n, D) + n^2 D_in)``, memory ``O(n D + n^2)``: never ``D x D`` or
    ``D_in x D_in``."""

    name = "geometry"
    options = GeometryOptions

    def __init__(self, embedder, *, max_examples: int = 2000):
        super().__init__(embedder)
        self.max_examples = max_examples

    def run(self, variables):
        test = self.embedder.splits["test"]
        n = min(self.max_examples, len(test["x"]))
        z = self.embedder.embed(variables, test["x"])[:n]
        if "x_pos" in test and self.embedder.pairs_ok:
            z_q = self.embedder.embed(variables, test["x"][:n], "query")
            z_pos = self.embedder.embed(variables, test["x_pos"][:n], "pos")
            if z_pos.shape == z_q.shape:
                yield "alignment", float(alignment(z_q, z_pos))
        yield "uniformity", float(uniformity(z))
        yield "effective_rank", float(effective_rank(z))
        yield "anisotropy", float(anisotropy(z))
        yield "coding_rate", float(coding_rate(normalize_rows(z)))
        yield "feature_std", float(feature_std(z))
        x = np.asarray(test["x"][:n])
        if x.dtype.kind == "f":
            dim = int(np.prod(x.shape[1:]))
            yield "cka_vs_input", float(linear_cka(z, x.reshape(n, -1)) if dim <= n else
                                        linear_cka_gram(z @ z.T, gram(x)))
