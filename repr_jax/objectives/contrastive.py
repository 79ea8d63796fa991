"""Contrastive objectives: pure functions of embedding arrays (no collectives, no configs).

Batch-coupled losses take the *global* batch: under ``jax.jit`` on arrays sharded over a mesh, XLA
inserts the communication, so the same code is exact on one device or many.

Reductions: ``nt_xent``, ``clip_loss`` and ``siglip_loss`` return a scalar (their references' value);
``info_nce`` and ``supcon`` return per-example losses ``[B]`` whose mean is the reference's value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def l2_normalize(x: jax.Array, eps: float = 1e-12) -> jax.Array:
    """``x / max(||x||, eps)`` along the last axis (``torch.nn.functional.normalize``)."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def check_pair(name: str, a: jax.Array, b: jax.Array) -> None:
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
    check_pair("nt_xent", z1, z2)
    b = z1.shape[0]
    u_NxD = l2_normalize(jnp.concatenate([z1, z2], axis=0).astype(jnp.float32))
    sim_NxN = (u_NxD @ u_NxD.T) / temperature
    n = 2 * b
    sim_NxN = jnp.where(jnp.eye(n, dtype=bool), -jnp.inf, sim_NxN)  # self is never a candidate
    pos_N = jnp.concatenate([jnp.arange(b, n), jnp.arange(b)])
    pos_sim_N = jnp.take_along_axis(sim_NxN, pos_N[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(sim_NxN, axis=1) - pos_sim_N)


def info_nce(q: jax.Array, k: jax.Array, temperature: float | jax.Array = 0.05,
             negatives: jax.Array | None = None, *, normalize: bool = True) -> jax.Array:
    """One-directional InfoNCE with in-batch (and optional extra) negatives. Per-example ``[B]``.

    Args:
      q: ``[B, D]`` queries (anchors).
      k: ``[B, D]`` keys; row ``i`` is the positive of query ``i``, the other rows are negatives.
      temperature: softmax temperature (``scale = 1 / temperature`` in sentence-transformers).
      negatives: optional extra negatives shared by every query, ``[M, D]``, or ``[B, K, D]`` (flattened
        to ``B*K`` shared columns, as sentence-transformers does with hard-negative columns).

    ``loss_i = -log softmax_j(cos(q_i, c_j) / temperature)[i]`` over candidates ``c = [k; negatives]``.
    The mean equals ``MultipleNegativesRankingLoss(scale=1/temperature)`` of sentence-transformers
    (van den Oord et al. 2018; Henderson et al. 2017). ``normalize=False``: dot products in place of
    cosines (sparse encoders: ``SparseMultipleNegativesRankingLoss``, scale 1 = temperature 1).
    """
    check_pair("info_nce", q, k)
    cands = k
    if negatives is not None:
        negatives = negatives.reshape(-1, negatives.shape[-1])
        if negatives.shape[-1] != q.shape[-1]:
            raise ValueError(f"info_nce: negatives {negatives.shape} must end in D={q.shape[-1]}")
        cands = jnp.concatenate([k, negatives], axis=0)
    unit = l2_normalize if normalize else (lambda x: x)
    logits_BxC = unit(q.astype(jnp.float32)) @ unit(cands.astype(jnp.float32)).T
    logits_BxC = logits_BxC / temperature
    return jax.nn.logsumexp(logits_BxC, axis=1) - jnp.diagonal(logits_BxC[:, : q.shape[0]])


def clip_loss(a: jax.Array, b: jax.Array, logit_scale: float | jax.Array) -> jax.Array:
    """Symmetric CLIP cross-entropy (Radford et al. 2021). Scalar.

    Args:
      a: ``[B, D]`` first tower's embeddings, already L2-normalised.
      b: ``[B, D]`` second tower's embeddings, already L2-normalised; ``(a_i, b_i)`` are pairs.
      logit_scale: the multiplier of the logits (``exp`` of the learned log-scale; 1/temperature).

    ``logits = logit_scale * a @ b.T``; the mean of the a→b and b→a cross-entropies with the diagonal
    as targets, as open_clip's ``ClipLoss``.
    """
    check_pair("clip_loss", a, b)
    logits_BxB = logit_scale * (a.astype(jnp.float32) @ b.astype(jnp.float32).T)
    diag_B = jnp.diagonal(logits_BxB)
    a_to_b = jax.nn.logsumexp(logits_BxB, axis=1) - diag_B
    b_to_a = jax.nn.logsumexp(logits_BxB, axis=0) - diag_B
    return 0.5 * (a_to_b.mean() + b_to_a.mean())


def siglip_loss(a: jax.Array, b: jax.Array, logit_scale: float | jax.Array,
                logit_bias: float | jax.Array) -> jax.Array:
    """Pairwise sigmoid loss of SigLIP (Zhai et al. 2023). Scalar.

    ``-sum_ij log_sigmoid(y_ij * (logit_scale * a_i . b_j + logit_bias)) / B`` with ``y_ij = +1`` on the
    diagonal and ``-1`` elsewhere; ``a``, ``b`` ``[B, D]`` already L2-normalised: open_clip's
    ``SigLipLoss``.
    """
    check_pair("siglip_loss", a, b)
    logits_BxB = logit_scale * (a.astype(jnp.float32) @ b.astype(jnp.float32).T) + logit_bias
    labels_BxB = 2.0 * jnp.eye(a.shape[0]) - 1.0
    return -jnp.sum(jax.nn.log_sigmoid(labels_BxB * logits_BxB)) / a.shape[0]


def supcon(z: jax.Array, labels: jax.Array, temperature: float | jax.Array = 0.1) -> jax.Array:
    """Supervised contrastive loss, the "L_out" form of Khosla et al. 2020 (eq. 2). Per-example ``[B]``.

    Args:
      z: ``[B, V, D]`` embeddings of ``V`` views of each example (cosine similarity is used).
      labels: ``[B]`` integer classes.
      temperature: softmax temperature.

    Every one of the ``B*V`` views is an anchor ``i``; its positives ``P(i)`` are all other views with
    its label, and ``loss_i = -1/|P(i)| sum_{p in P(i)} log(exp(s_ip) / sum_{a != i} exp(s_ia))``,
    ``s = cos / temperature``. Example ``b``'s value is the mean over its ``V`` anchors, so the batch
    mean equals the reference implementation's (HobbitLong/SupContrast ``SupConLoss`` with
    ``contrast_mode='all'`` and ``base_temperature = temperature``). Anchors need a positive: ``V >= 2``
    or a repeated label.
    """
    if z.ndim != 3 or labels.shape != z.shape[:1]:
        raise ValueError(f"supcon expects z [B, V, D] and labels [B]; got {z.shape} and "
                         f"{labels.shape}")
    b, v, _ = z.shape
    u_NxD = l2_normalize(z.reshape(b * v, -1).astype(jnp.float32))
    lab_N = jnp.repeat(labels, v)
    self_NxN = jnp.eye(b * v, dtype=bool)
    sim_NxN = jnp.where(self_NxN, -jnp.inf, (u_NxD @ u_NxD.T) / temperature)
    log_prob_NxN = sim_NxN - jax.nn.logsumexp(sim_NxN, axis=1, keepdims=True)
    pos_NxN = (lab_N[:, None] == lab_N[None, :]) & ~self_NxN
    mean_log_prob_pos_N = (jnp.sum(jnp.where(pos_NxN, log_prob_NxN, 0.0), axis=1)
                           / jnp.sum(pos_NxN, axis=1))
    return -mean_log_prob_pos_N.reshape(b, v).mean(axis=1)
