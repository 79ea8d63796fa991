"""Scaled dot-product attention for the encoder families, following the mixed-precision policy.

One formulation for text_transformer and vit: heads moved in front (``[B, H, T, Dh]``, the
layout XLA:CPU's batched GEMM kernels take without copies), the scale folded into the queries
(``[B, T, D]`` work instead of ``[B, H, T, T]``), and the softmax's division deferred past the
probability-value product: ``(exp(s - max s) @ v) / sum exp(s - max s)`` divides ``[B, H, T, Dh]``
instead of ``[B, H, T, T]``. The result equals ``softmax(s) @ v`` exactly in real arithmetic;
both products go through :mod:`repr_jax.encoders.precision` (bfloat16 GEMMs with float32 results
under ``precision.mixed()``), and the exponentials and their sums stay float32. Cost
O(B · H · T² · Dh) compute, O(B · H · T²) memory, as any materialised attention.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from repr_jax.encoders import precision


def attend(q_BxTxHxDh: jax.Array, k_BxSxHxDh: jax.Array, v_BxSxHxDh: jax.Array,
           bias: jax.Array | None = None, mask: jax.Array | None = None) -> jax.Array:
    """Multi-head attention of queries over keys. ``bias`` broadcasts to ``[B, H, T, S]`` and is
    added to the scores (BERT's convention: 0 for a key to attend, ``jnp.finfo(dtype).min`` for
    one to skip); ``mask`` (boolean, broadcasting likewise) replaces skipped scores by that
    minimum, so no gradient reaches them (flax's convention). Returns ``[B, T, H, Dh]`` in the
    queries' dtype."""
    dh = q_BxTxHxDh.shape[-1]
    q = (q_BxTxHxDh * (1.0 / jnp.sqrt(dh)).astype(q_BxTxHxDh.dtype)).transpose(0, 2, 1, 3)
    k = k_BxSxHxDh.transpose(0, 2, 1, 3)
    v = v_BxSxHxDh.transpose(0, 2, 1, 3)
    s_BxHxTxS = precision.einsum("bhqd,bhkd->bhqk", q, k)
    if bias is not None:
        s_BxHxTxS = s_BxHxTxS + bias
    if mask is not None:
        s_BxHxTxS = jnp.where(mask, s_BxHxTxS, jnp.finfo(s_BxHxTxS.dtype).min)
    # the shift cancels in the ratio below: no gradient flows through it
    s_BxHxTxS = s_BxHxTxS - lax.stop_gradient(s_BxHxTxS.max(axis=-1, keepdims=True))
    e_BxHxTxS = jnp.exp(s_BxHxTxS)
    out_BxHxTxDh = precision.einsum("bhqk,bhkd->bhqd", e_BxHxTxS, v)
    out_BxHxTxDh = out_BxHxTxDh / e_BxHxTxS.sum(axis=-1, keepdims=True)
    return out_BxHxTxDh.transpose(0, 2, 1, 3).astype(q_BxTxHxDh.dtype)
