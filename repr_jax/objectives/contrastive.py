"""Contrastive objectives: pure functions of embedding arrays (no collectives, no configs).

Batch-coupled losses take the *global* batch: under ``jax.jit`` on arrays sharded over a mesh, XLA
inserts the communication, so the same code is exact on one device or many.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _l2_normalize(x: jax.Array, eps: float = 1e-12) -> jax.Array:
    # Matches torch.nn.functional.normalize(x, dim=-1): x / max(||x||, eps).
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def _check_pair(name: str, a: jax.Array, b: jax.Array) -> None:
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"{name} expects two [B, D] arrays of equal shape; got {a.shape} and "
                         f"{b.shape}")


def nt_xent(z1: jax.Array, z2: jax.Array, temperature: float | jax.Array = 0.5) -> jax.Array:
    """SimCLR's NT-Xent (normalised temperature-scaled cross-entropy) over 2B views. Scalar.

    Args:
      z1: ``[B, D]`` first views; row ``i`` of ``z1`` and row ``i`` of ``z2`` are a positive pair.
      z2: ``[B, D]`` second views.
      temperature: softmax temperature ``tau`` (may be a traced scalar).

    With ``u = normalize(concat(z1, z2))`` (``[2B, D]``) and ``s_ij = u_i . u_j / tau``, anchor ``i``
    has loss ``-s_{i,p(i)} + log sum_{j != i} exp(s_ij)`` where ``p(i)`` is its other view; the result is
    the mean over all 2B anchors (Chen et al. 2020, eq. 1). Same value as lightly's
    ``NTXentLoss(temperature)`` without a memory bank.

    >>> import jax.numpy as jnp
    >>> z = jnp.eye(2)
    >>> round(float(nt_xent(z, z, temperature=1.0)), 4)   # log(e + 2) - 1, by hand
    0.5514
    """
    _check_pair("nt_xent", z1, z2)
    b = z1.shape[0]
    u_NxD = _l2_normalize(jnp.concatenate([z1, z2], axis=0).astype(jnp.float32))
    sim_NxN = (u_NxD @ u_NxD.T) / temperature
    n = 2 * b
    sim_NxN = jnp.where(jnp.eye(n, dtype=bool), -jnp.inf, sim_NxN)  # self is never a candidate
    pos_N = jnp.concatenate([jnp.arange(b, n), jnp.arange(b)])
    pos_sim_N = jnp.take_along_axis(sim_NxN, pos_N[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(sim_NxN, axis=1) - pos_sim_N)
