"""Padding-aware pooling of token states ``[B, T, D]`` with a validity mask ``[B, T]`` into ``[B, D]``.

Every pooling ignores padded positions, so padding never changes the pooled embedding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def mean_pool(tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean over valid tokens (sentence-transformers' ``pooling_mode_mean_tokens``)."""
    m = mask[..., None].astype(tokens.dtype)
    return jnp.sum(tokens * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1e-9)


def max_pool(tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """Max over valid tokens (InferSent)."""
    return jnp.max(jnp.where(mask[..., None], tokens, jnp.finfo(tokens.dtype).min), axis=1)


def cls_pool(tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """The first token's state (BERT's ``[CLS]``)."""
    del mask
    return tokens[:, 0]


def last_token_pool(tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """The state of each row's last valid token (decoder-style embeddings)."""
    last = jnp.maximum(jnp.sum(mask.astype(jnp.int32), axis=1) - 1, 0)
    return jnp.take_along_axis(tokens, last[:, None, None], axis=1)[:, 0]


POOLINGS = {"mean": mean_pool, "max": max_pool, "cls": cls_pool, "last_token": last_token_pool}


def pool(kind: str, tokens: jax.Array, mask: jax.Array) -> jax.Array:
    if kind not in POOLINGS:
        raise ValueError(f"unknown pooling {kind!r}; choose from: {', '.join(POOLINGS)}")
    return POOLINGS[kind](tokens, mask)
