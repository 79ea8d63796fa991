"""Reconstruction objectives: masked patches (MAE) and masked tokens (MLM). Both scalar: they average
over the masked positions of the whole batch, as their references do."""

from __future__ import annotations

import jax.numpy as jnp
import optax


def mae_loss(pred, target, mask, norm_pix: bool = True):
    """MAE reconstruction error on masked patches only (He et al. 2022). Scalar.

    Args:
      pred, target: ``[B, N, P]`` predicted and true patches (``P`` values per patch).
      mask: ``[B, N]``, 1 where the patch was masked (hidden from the encoder), 0 where visible.
      norm_pix: normalise each target patch by its own mean and variance (``eps = 1e-6``).

    ``sum(mask * mean_P((pred - target)^2)) / sum(mask)``, as ``forward_loss`` in the MAE repository.
    """
    if pred.shape != target.shape or pred.ndim != 3 or mask.shape != pred.shape[:2]:
        raise ValueError(f"mae_loss expects pred/target [B, N, P] and mask [B, N]; got "
                         f"{pred.shape}, {target.shape}, {mask.shape}")
    target = target.astype(jnp.float32)
    if norm_pix:
        mean = target.mean(axis=-1, keepdims=True)
        var = target.var(axis=-1, ddof=1, keepdims=True)
        target = (target - mean) / jnp.sqrt(var + 1e-6)
    per_patch = jnp.mean((pred.astype(jnp.float32) - target) ** 2, axis=-1)
    mask = mask.astype(jnp.float32)
    return jnp.sum(per_patch * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def mlm_loss(logits, labels, mask):
    """Masked-token cross-entropy averaged over masked positions only (Devlin et al. 2019). Scalar.

    ``logits`` ``[B, T, V]``, ``labels`` ``[B, T]`` (original token ids), ``mask`` ``[B, T]`` (1 where
    the token was masked). Equals ``CrossEntropyLoss(ignore_index=-100)`` with unmasked labels set to
    -100.
    """
    if logits.shape[:2] != labels.shape or mask.shape != labels.shape:
        raise ValueError(f"mlm_loss expects logits [B, T, V], labels and mask [B, T]; got "
                         f"{logits.shape}, {labels.shape}, {mask.shape}")
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    mask = (mask > 0).astype(jnp.float32)
    return jnp.sum(ce * mask) / jnp.maximum(jnp.sum(mask), 1.0)

