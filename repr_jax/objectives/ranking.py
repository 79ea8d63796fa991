"""Metric-learning, ranking and distillation objectives.

Per-example ``[B]``: ``triplet``, ``batch_hard_triplet``, ``graded_bce``, ``margin_mse``,
``kl_distill``. Scalar: ``cosent`` (a single log-sum-exp over all ordered pairs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from repr_jax.objectives.contrastive import check_pair, l2_normalize


def triplet(anchor: jax.Array, positive: jax.Array, negative: jax.Array,
            margin: float | jax.Array = 1.0, eps: float = 1e-6) -> jax.Array:
    """``max(d(a, p) - d(a, n) + margin, 0)`` per example ``[B]``, Euclidean distance.

    ``d(x, y) = ||x - y + eps||_2`` exactly as ``torch.nn.TripletMarginLoss(p=2)`` (whose mean is the
    torch default reduction).
    """
    check_pair("triplet", anchor, positive)
    check_pair("triplet", anchor, negative)
    d_ap = jnp.linalg.norm(anchor - positive + eps, axis=-1)
    d_an = jnp.linalg.norm(anchor - negative + eps, axis=-1)
    return jax.nn.relu(d_ap - d_an + margin)


def _pairwise_euclidean(z_BxD):
    """Euclidean distance matrix with a safe gradient at zero (sentence-transformers' convention)."""
    sq_B = jnp.sum(z_BxD * z_BxD, axis=1)
    d2 = jax.nn.relu(sq_B[:, None] - 2.0 * (z_BxD @ z_BxD.T) + sq_B[None, :])
    zero = d2 == 0.0
    return jnp.where(zero, 0.0, jnp.sqrt(jnp.where(zero, 1e-16, d2)))


def batch_hard_triplet(z: jax.Array, labels: jax.Array, margin: float | jax.Array = 5.0
                       ) -> jax.Array:
    """Batch-hard triplet loss (Hermans et al. 2017). Per-anchor ``[B]``.

    For each anchor: the largest distance to a same-label example (hardest positive, 0 if none) and
    the smallest distance to a different-label example (hardest negative), then
    ``relu(hardest_pos - hardest_neg + margin)``. The mean equals sentence-transformers'
    ``BatchHardTripletLoss`` with its Euclidean distance (whose default margin is 5).
    """
    if z.ndim != 2 or labels.shape != z.shape[:1]:
        raise ValueError(f"batch_hard_triplet expects z [B, D] and labels [B]; got {z.shape} and "
                         f"{labels.shape}")
    dist_BxB = _pairwise_euclidean(z.astype(jnp.float32))
    same = labels[:, None] == labels[None, :]
    pos_mask = same & ~jnp.eye(z.shape[0], dtype=bool)
    hardest_pos = jnp.max(jnp.where(pos_mask, dist_BxB, 0.0), axis=1)
    row_max = jnp.max(dist_BxB, axis=1, keepdims=True)
    hardest_neg = jnp.min(dist_BxB + row_max * same, axis=1)
    return jax.nn.relu(hardest_pos - hardest_neg + margin)


def graded_bce(q: jax.Array, d: jax.Array, relevance: jax.Array,
               temperature: float | jax.Array = 0.05) -> jax.Array:
    """Pointwise BCE on graded relevance over all in-batch pairs (BiXSE). Per-query ``[B]``.

    Args:
      q: ``[B, D]`` queries; d: ``[N, D]`` documents (usually the B positives, N = B).
      relevance: ``[B, N]`` graded targets in ``[0, 1]`` (e.g. LLM-graded; 0 for in-batch negatives).
      temperature: the cosine is scaled by ``1 / temperature`` before the sigmoid.

    ``loss_i = mean_j BCE(sigmoid(cos(q_i, d_j) / temperature), relevance_ij)``; the batch mean is the
    mean over all ``B * N`` pairs.
    """
    if q.ndim != 2 or d.ndim != 2 or relevance.shape != (q.shape[0], d.shape[0]):
        raise ValueError(f"graded_bce expects q [B, D], d [N, D], relevance [B, N]; got {q.shape}, "
                         f"{d.shape}, {relevance.shape}")
    logits = l2_normalize(q.astype(jnp.float32)) @ l2_normalize(d.astype(jnp.float32)).T
    logits = logits / temperature
    r = relevance.astype(jnp.float32)
    bce = -(r * jax.nn.log_sigmoid(logits) + (1.0 - r) * jax.nn.log_sigmoid(-logits))
    return bce.mean(axis=1)


def margin_mse(s_pos: jax.Array, s_neg: jax.Array, t_pos: jax.Array, t_neg: jax.Array
               ) -> jax.Array:
    """``((s_pos - s_neg) - (t_pos - t_neg))^2`` per example ``[B]`` (Hofstätter et al. 2020).

    Scores are ``[B]`` (or ``[B, K]`` for K negatives, averaged over K). The mean equals
    sentence-transformers' ``MarginMSELoss`` given student scores and the teacher margins as labels.
    """
    err = (s_pos[..., None] if s_neg.ndim == 2 else s_pos) - s_neg
    err = err - ((t_pos[..., None] if t_neg.ndim == 2 else t_pos) - t_neg)
    sq = err.astype(jnp.float32) ** 2
    return sq.mean(axis=1) if sq.ndim == 2 else sq


def kl_distill(student_scores: jax.Array, teacher_scores: jax.Array,
               temperature: float | jax.Array = 1.0) -> jax.Array:
    """``KL(teacher || student)`` over each row's candidate list, times ``temperature^2``. ``[B]``.

    ``p = softmax(teacher / T)``, ``log q = log_softmax(student / T)``, ``loss_i = T^2 * sum_j p_ij
    (log p_ij - log q_ij)``. The mean equals sentence-transformers' ``DistillKLDivLoss`` (KLDivLoss
    with ``reduction="batchmean"``).
    """
    if student_scores.shape != teacher_scores.shape or student_scores.ndim != 2:
        raise ValueError(f"kl_distill expects two [B, C] score arrays; got "
                         f"{student_scores.shape} and {teacher_scores.shape}")
    log_q = jax.nn.log_softmax(student_scores.astype(jnp.float32) / temperature, axis=1)
    log_p = jax.nn.log_softmax(teacher_scores.astype(jnp.float32) / temperature, axis=1)
    kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=1)
    return kl * temperature ** 2


def cosent(s1: jax.Array, s2: jax.Array, labels: jax.Array, scale: float | jax.Array = 20.0
           ) -> jax.Array:
    """CoSENT (Su 2022). Scalar.

    ``s_i = scale * cos(s1_i, s2_i)`` for embedding pairs ``s1``, ``s2`` ``[B, D]`` with gold similarity
    ``labels`` ``[B]``; ``loss = log(1 + sum_{(i, j): labels_i < labels_j} exp(s_i - s_j))``, as
    sentence-transformers' ``CoSENTLoss``.
    """
    check_pair("cosent", s1, s2)
    scores = scale * jnp.sum(l2_normalize(s1.astype(jnp.float32))
                             * l2_normalize(s2.astype(jnp.float32)), axis=-1)
    diff_BxB = scores[:, None] - scores[None, :]
    valid = labels[:, None] < labels[None, :]
    diff = jnp.where(valid, diff_BxB, -jnp.inf).reshape(-1)
    return jax.nn.logsumexp(jnp.concatenate([jnp.zeros((1,)), diff]))
