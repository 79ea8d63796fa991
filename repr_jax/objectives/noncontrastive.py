"""Non-contrastive objectives: predictor cosine, VICReg, Barlow Twins, the spread-out regulariser.

``negative_cosine`` is per-example ``[B]``; ``vicreg`` and ``barlow_twins`` are batch-statistic losses
and return a scalar; ``spread_out`` returns its two batch statistics (two scalars).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from repr_jax.objectives.contrastive import check_pair, l2_normalize


def negative_cosine(p: jax.Array, z: jax.Array) -> jax.Array:
    """``-cos(p_i, stop_gradient(z_i))`` per example ``[B]`` (BYOL/SimSiam predictor loss).

    Only the predictor side gets gradients; using both directions symmetrically is the method's job.
    lightly's ``NegativeCosineSimilarity`` is the same without the stop-gradient (its callers detach).
    """
    check_pair("negative_cosine", p, z)
    z = jax.lax.stop_gradient(z)
    return -jnp.sum(l2_normalize(p.astype(jnp.float32)) * l2_normalize(z.astype(jnp.float32)), -1)


def _variance_term(x_BxD, eps):
    std_D = jnp.sqrt(jnp.var(x_BxD, axis=0, ddof=1) + eps)
    return jnp.mean(jax.nn.relu(1.0 - std_D))


def _covariance_term(x_BxD):
    b, d = x_BxD.shape
    xc = x_BxD - x_BxD.mean(axis=0, keepdims=True)
    cov_DxD = (xc.T @ xc) / (b - 1)
    off = ~jnp.eye(d, dtype=bool)
    return jnp.sum(jnp.where(off, cov_DxD, 0.0) ** 2) / d


def vicreg(z1: jax.Array, z2: jax.Array, sim_weight: float | jax.Array = 25.0,
           var_weight: float | jax.Array = 25.0, cov_weight: float | jax.Array = 1.0,
           eps: float = 1e-4) -> jax.Array:
    """VICReg (Bardes et al. 2022). Scalar.

    ``sim_weight * mse(z1, z2) + var_weight * (v(z1) + v(z2)) / 2 + cov_weight * (c(z1) + c(z2))``
    with ``v(x) = mean_d relu(1 - sqrt(var_d(x) + eps))`` (unbiased variance) and ``c(x)`` the sum of
    squared off-diagonal covariances divided by ``D``: lightly's ``VICRegLoss``.
    """
    check_pair("vicreg", z1, z2)
    if z1.shape[0] < 2:
        raise ValueError(f"vicreg needs a batch of at least 2; got {z1.shape}")
    z1, z2 = z1.astype(jnp.float32), z2.astype(jnp.float32)
    invariance = jnp.mean((z1 - z2) ** 2)
    variance = 0.5 * (_variance_term(z1, eps) + _variance_term(z2, eps))
    covariance = _covariance_term(z1) + _covariance_term(z2)
    return sim_weight * invariance + var_weight * variance + cov_weight * covariance


def barlow_twins(z1: jax.Array, z2: jax.Array, lambda_: float | jax.Array = 5e-3,
                 eps: float = 1e-5) -> jax.Array:
    """Barlow Twins (Zbontar et al. 2021). Scalar.

    Each view is standardised along the batch as the official code's ``BatchNorm1d(affine=False)``
    does in training (biased variance, ``eps`` inside the square root), ``C = z1n.T @ z2n / B`` is
    their cross-correlation, and the loss is ``sum_i (1 - C_ii)^2 + lambda_ * sum_{i != j} C_ij^2``:
    facebookresearch/barlowtwins and lightly's ``BarlowTwinsLoss`` (>= 1.5).
    """
    check_pair("barlow_twins", z1, z2)
    b, d = z1.shape

    def standardize(x):
        x = x.astype(jnp.float32)
        centred = x - x.mean(0, keepdims=True)
        return centred * jax.lax.rsqrt(jnp.mean(centred**2, axis=0, keepdims=True) + eps)

    c_DxD = standardize(z1).T @ standardize(z2) / b
    on_diag = jnp.sum((jnp.diagonal(c_DxD) - 1.0) ** 2)
    off_diag = jnp.sum(jnp.where(jnp.eye(d, dtype=bool), 0.0, c_DxD) ** 2)
    return on_diag + lambda_ * off_diag


def spread_out(x_BxD: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The spread-out (global orthogonal) regulariser's two moments of one batch's cosines.

    With ``S`` the ``[B, B]`` cosine similarities of the rows of ``x`` (float32), its diagonal set
    to 0, and ``n = B (B - 1)`` the off-diagonal pairs::

        mean_term = (sum(S) / n) ** 2
        second_moment = sum(S ** 2) / n

    Returns ``(mean_term, second_moment)``, two scalars. Zhang et al. 2017 (arXiv 1708.06320)
    penalise ``mean_term + relu(second_moment - 1 / D)`` (the moments of uniformly spread unit
    vectors); EmbeddingGemma (arXiv 2509.20354) adds the raw ``second_moment`` of its queries and,
    separately, of its documents to the contrastive loss. sentence-transformers'
    ``GlobalOrthogonalRegularizationLoss`` computes both terms per column as here. Orthonormal rows
    give ``(0, 0)``, identical rows ``(1, 1)``. Time O(B^2 D), memory O(B^2 + B D).
    """
    if x_BxD.ndim != 2:
        raise ValueError(f"spread_out expects a [B, D] array; got shape {x_BxD.shape}")
    b = x_BxD.shape[0]
    if b < 2:
        raise ValueError(f"spread_out needs a batch of at least 2 (it averages over pairs of "
                         f"different rows); got shape {x_BxD.shape}")
    u_BxD = l2_normalize(x_BxD.astype(jnp.float32))
    s_BxB = jnp.where(jnp.eye(b, dtype=bool), 0.0, u_BxD @ u_BxD.T)
    n = b * (b - 1)
    return (jnp.sum(s_BxB) / n) ** 2, jnp.sum(s_BxB ** 2) / n
