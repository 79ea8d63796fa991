"""Backward-compatible training (BCT; Shen et al. 2020)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def bct_influence(new_z: jax.Array, old_head_params: dict, labels: jax.Array) -> jax.Array:
    """Cross-entropy of the *old* model's frozen classifier on the *new* embeddings. Per-example ``[B]``.

    Args:
      new_z: ``[B, D]`` embeddings from the model being trained.
      old_head_params: the old linear classifier, ``{"kernel": [D, C], "bias": [C]}`` (flax Dense
        layout); gradients do not flow into it.
      labels: ``[B]`` integer classes.

    Minimising it keeps new embeddings in the old embedding space (the "influence loss"), so a new
    query can be compared with an old gallery without re-indexing.
    """
    head = jax.lax.stop_gradient(old_head_params)
    kernel = head["kernel"]
    if new_z.ndim != 2 or kernel.shape[0] != new_z.shape[1]:
        raise ValueError(f"bct_influence: new_z {new_z.shape} does not fit the old head's kernel "
                         f"{kernel.shape} ([D, C])")
    logits = new_z.astype(jnp.float32) @ kernel
    if "bias" in head:
        logits = logits + head["bias"][None, :]
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)
