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


def layer_summaries(embedding: jax.Array, features: dict) -> tuple[jax.Array, ...]:
    """Each hidden layer of ``features["layers"]`` averaged over its token or spatial axes (valid
    tokens only, when ``features`` has a ``mask``), then the final ``embedding``: ``[B, D_l]`` each,
    the inputs of layer-wise evaluation."""
    mask = features.get("mask")
    out = []
    for h in features.get("layers", ()):
        if h.ndim == 2:
            out.append(h)
        elif h.ndim == 3 and mask is not None and mask.shape == h.shape[:2]:
            out.append(pool("mean", h, mask))
        else:
            out.append(h.reshape(h.shape[0], -1, h.shape[-1]).mean(1))
    return tuple(out) + (embedding,)


# ----------------------------------------------------------------------------- learned poolings
import flax.linen as nn  # noqa: E402


class AttentionPool(nn.Module):
    """Learned-query pooling (PMA / bottleneck tokens; Lee et al. 2019): ``num_queries`` learned
    queries attend over the valid tokens with multi-head attention; their outputs are averaged."""
    num_heads: int = 1
    num_queries: int = 1

    @nn.compact
    def __call__(self, tokens, mask):
        b, _, d = tokens.shape
        q = self.param("queries", nn.initializers.normal(0.02), (self.num_queries, d))
        attn_mask = jnp.broadcast_to(mask[:, None, None, :], (b, 1, self.num_queries,
                                                                mask.shape[1]))
        out = nn.MultiHeadDotProductAttention(self.num_heads, name="attn")(
            jnp.broadcast_to(q[None], (b, self.num_queries, d)), tokens, mask=attn_mask)
        return out.mean(axis=1)


class MultiLayerPool(nn.Module):
    """Pools every layer (mean over valid tokens) and combines them: a learned softmax-weighted sum
    (``combine="weighted"``, like ELMo's scalar mix) or a concatenation (``"concat"``)."""
    combine: str = "weighted"

    @nn.compact
    def __call__(self, layers, mask):
        pooled = [mean_pool(h, mask) for h in layers]
        if self.combine == "concat":
            return jnp.concatenate(pooled, axis=-1)
        w = jax.nn.softmax(self.param("layer_logits", nn.initializers.zeros, (len(pooled),)))
        return jnp.einsum("l,lbd->bd", w, jnp.stack(pooled))


def insert_landmarks(ids: jax.Array, mask: jax.Array, *, chunk: int, landmark_id: int,
                     pad_id: int = 0) -> tuple[jax.Array, jax.Array]:
    """Inserts a landmark token after every ``chunk`` valid tokens (and after the last, partial
    chunk) of each row (LMK pooling). Returns ``(new_ids [B, T + ceil(T/chunk)], landmark_mask)``."""
    b, t = ids.shape
    n_chunks = -(-t // chunk)
    width = t + n_chunks
    n_B = jnp.sum(mask, axis=1)
    pos = jnp.arange(t)
    out = jnp.full((b, width), pad_id, ids.dtype)
    out = out.at[:, pos + pos // chunk].set(jnp.where(mask, ids, pad_id))
    j = jnp.arange(n_chunks)[None, :]
    lmk_pos = jnp.minimum((j + 1) * chunk, n_B[:, None]) + j
    lmk_pos = jnp.where(j * chunk < n_B[:, None], lmk_pos, width)  # chunks with no token: dropped
    rows = jnp.arange(b)[:, None]
    out = out.at[rows, lmk_pos].set(landmark_id, mode="drop")
    lmk_mask = jnp.zeros((b, width), bool).at[rows, lmk_pos].set(True, mode="drop")
    return out, lmk_mask


def pool_tokens(kind: str, tokens, mask, layers, *, num_heads: int = 1):
    """Any non-landmark pooling by name; call inside a compact ``__call__`` (learned poolings create
    their submodule, named ``attention_pool`` / ``multi_layer_pool``, in the caller)."""
    if kind == "attention":
        return AttentionPool(num_heads, name="attention_pool")(tokens, mask)
    if kind == "multi_layer":
        return MultiLayerPool(name="multi_layer_pool")(layers, mask)
    return pool(kind, tokens, mask)


LEARNED_POOLINGS = ("attention", "multi_layer")
ALL_POOLINGS = tuple(POOLINGS) + LEARNED_POOLINGS + ("landmark",)
