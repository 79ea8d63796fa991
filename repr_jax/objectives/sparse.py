"""Regularisers of learned sparse representations (SPLADE): FLOPS and its quadratic warm-up.

FLOPS (Paria et al. 2020, "Minimizing FLOPs to learn efficient sparse representations", eq. 4;
Formal et al. 2021, SPLADE) is the squared L2 norm of the batch's mean term-weight vector,
``sum_t (mean_i w_{i,t})^2``: a smooth stand-in for the expected number of multiply-adds between
two sparse vectors, which pushes down most the terms that are frequent across the batch. Paria et
al. write ``|w|``; SPLADE's weights are ``>= 0`` (``log(1 + relu(.))``), where the two agree, and
sentence-transformers' ``FlopsLoss`` takes the plain mean, as here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def flops_regularizer(w_BxV: jax.Array) -> jax.Array:
    """FLOPS of a batch of term weights ``[B, V]``: ``sum_t (mean_i w_{i,t})^2``. Scalar (a batch
    statistic, already reduced). Equals sentence-transformers' ``FlopsLoss`` without threshold
    and, on non-negative weights, naver/splade's ``FLOPS``.

    >>> float(flops_regularizer(jnp.array([[1.0, 0.0], [3.0, 2.0]])))
    5.0
    """
    if w_BxV.ndim != 2:
        raise ValueError(f"flops_regularizer expects term weights [B, V]; got {w_BxV.shape}")
    return jnp.sum(jnp.square(jnp.mean(w_BxV.astype(jnp.float32), axis=0)))


def warmed_up_weight(weight: float | jax.Array, step: int | jax.Array,
                     warmup: float | jax.Array) -> jax.Array:
    """A regulariser's weight at 0-based optimizer step ``step``, quadratically warmed up over
    ``warmup`` steps: ``weight * min(1, (step + 1) / warmup)^2``; ``warmup <= 0``: ``weight``.

    naver/splade's ``RegWeightScheduler`` (the schedule of Paria et al.): its ``step()`` runs
    before each update's loss, so the first update uses ``(1 / T)^2`` of the weight and update
    ``T`` and later the whole weight.

    >>> [round(float(warmed_up_weight(4.0, s, 4)), 3) for s in (0, 1, 3, 9)]
    [0.25, 1.0, 4.0, 4.0]
    """
    step = jnp.asarray(step, jnp.float32)
    warmup = jnp.asarray(warmup, jnp.float32)
    ramp = jnp.where(warmup > 0, jnp.minimum(1.0, (step + 1.0) / jnp.maximum(warmup, 1e-12)), 1.0)
    return weight * jnp.square(ramp)


__all__ = ["flops_regularizer", "warmed_up_weight"]
