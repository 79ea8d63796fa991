"""Concept directions under the linear representation hypothesis, and tests of their geometry.

Two families of quantities, both pure functions of arrays:

* **Directions read from representations** ``x_NxD`` with concept labels (a layer's activations):
  the one-vs-rest difference of class means (:func:`difference_of_means`), a one-vs-rest logistic
  probe's weight vector (:func:`probe_directions`, the project's
  :mod:`~repr_jax.eval.linear_probe` solver), the held-out accuracy of thresholding a projection
  (:func:`held_out_accuracy`) and its shuffled-label control (:func:`shuffled_accuracy`). The
  evaluator :class:`Concepts` (``eval.evaluators=('concepts',)``) reports them for every class of
  a labelled dataset on every layer (:func:`concept_accuracies`).

* **Vector representations in the unembedding space** (Park, Choe & Veitch 2023, "The Linear
  Representation Hypothesis and the Geometry of Large Language Models", arXiv 2311.03658; Park,
  Choe, Jiang & Veitch 2024, "The Geometry of Categorical and Hierarchical Concepts in Large
  Language Models", arXiv 2406.01506). With a decoder's unembedding vectors ``gamma(y)`` (rows of
  its output embedding), the *causal inner product* ``<a, b>_C = a^T Cov(gamma)^-1 b`` is the
  Euclidean one after ``g(y) = A (gamma(y) - E[gamma])``, ``A = Cov(gamma)^-1/2``
  (:func:`causal_transform`). A binary feature ``w`` (a concept such as *animal*, given by its
  word set ``Y(w)``) has the vector representation ``l_w`` estimated from its words' ``g``
  (:func:`lda_direction`). Park et al. 2024 prove that for a parent ``w`` and a child ``z < w``,
  ``l_w`` is orthogonal to ``l_z - l_w`` (hierarchical orthogonality, :func:`hierarchy_cosine`),
  and that the representations of k categorical values (*mammal, bird, fish*) form a
  (k-1)-simplex, i.e. they are affinely independent (:func:`simplex_test`).

Every interval is a percentile bootstrap (:mod:`~repr_jax.eval.stats`) returned as an
:class:`~repr_jax.eval.stats.Estimate`: over test examples for accuracies, and over *words* for
the unembedding-space quantities, each word set resampled on its own (stratified), the statistic
recomputed on each resample. Host-side draws (permutations, random word sets) come from
``numpy.random.default_rng(seed)``; bootstrap indices from ``jax.random.PRNGKey(seed)``, as in
:func:`~repr_jax.eval.stats.bootstrap_ci`. Costs are stated per function in N (examples or
words) and D (width); nothing forms an N x N matrix.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import config, static
from repr_jax.eval.base import Embedder, Evaluator
from repr_jax.eval.linear_probe import LOGISTIC_GRID, logistic_weights, standardize
from repr_jax.eval.stats import Estimate, normal_interval, with_ci



# ----------------------------------------------------------------------------------------------
# Directions from labelled representations
# ----------------------------------------------------------------------------------------------

def difference_of_means(x_NxD, labels_N, *, num_classes: int | None = None) -> np.ndarray:
    """One-vs-rest difference of means ``[C, D]``: row c is the mean of class c's examples minus
    the mean of all the other examples. Time and memory ``O(N D)`` (one segment sum).

    >>> x = np.array([[0., 0.], [2., 0.], [0., 2.], [2., 2.]])
    >>> difference_of_means(x, np.array([0, 0, 1, 1])).tolist()
    [[0.0, -2.0], [0.0, 2.0]]
    """
    x_NxD = jnp.asarray(x_NxD, jnp.float32)
    labels_N = np.asarray(labels_N)
    if x_NxD.ndim != 2 or labels_N.shape != x_NxD.shape[:1]:
        raise ValueError(f"difference_of_means expects x [N, D] and labels [N]; got "
                         f"{x_NxD.shape} and {labels_N.shape}")
    c = num_classes or int(labels_N.max()) + 1
    counts_C = np.bincount(labels_N, minlength=c)
    n = len(labels_N)
    if np.any(counts_C == 0) or np.any(counts_C == n):
        raise ValueError(f"every class needs examples in and out of it; class counts "
                         f"{counts_C.tolist()} of {n}")
    sums_CxD = jax.ops.segment_sum(x_NxD, jnp.asarray(labels_N), num_segments=c)
    total_1xD = x_NxD.sum(0, keepdims=True)
    counts = jnp.asarray(counts_C, jnp.float32)[:, None]
    return np.asarray(sums_CxD / counts - (total_1xD - sums_CxD) / (n - counts))


def held_out_accuracy(direction_D, x_train_NxD, y_train_N, x_test_MxD, y_test_M, *,
                      bootstrap: int = 1000, level: float = 0.95) -> dict:
    """Accuracy of a one-direction threshold classifier for a binary concept.

    Projects onto ``direction_D``; the threshold is the midpoint of the two classes' mean
    projections on train, and the side of the positive class's mean is predicted positive.
    Returns ``{"accuracy"`` (an :class:`Estimate` over test examples when ``bootstrap``),
    ``"correct"`` (``[M]`` 0/1, for the caller's own bootstrap or paired test), ``"predicted"``
    (``[M]`` 0/1), ``"threshold"``, ``"sign"`` (+1 when positives project higher)``}``.
    Time ``O((N + M) D)``, memory ``O((N + M) D)`` (the inputs), plus the bootstrap's
    ``O(R M)``.
    """
    d_D = np.asarray(direction_D, np.float32)
    x_train, x_test = np.asarray(x_train_NxD, np.float32), np.asarray(x_test_MxD, np.float32)
    y_train, y_test = np.asarray(y_train_N).astype(bool), np.asarray(y_test_M).astype(bool)
    if (d_D.ndim != 1 or x_train.shape[1:] != d_D.shape or x_test.shape[1:] != d_D.shape
            or y_train.shape != x_train.shape[:1] or y_test.shape != x_test.shape[:1]):
        raise ValueError(f"held_out_accuracy expects direction [D], x [N, D], y [N]; got "
                         f"{d_D.shape}, {x_train.shape}, {y_train.shape}, {x_test.shape}, "
                         f"{y_test.shape}")
    if y_train.all() or not y_train.any():
        raise ValueError("held_out_accuracy needs both classes in y_train")
    p_train = (x_train @ d_D).astype(np.float64)
    m1, m0 = p_train[y_train].mean(), p_train[~y_train].mean()
    threshold, sign = (m1 + m0) / 2, (1.0 if m1 >= m0 else -1.0)
    predicted = sign * ((x_test @ d_D).astype(np.float64) - threshold) > 0
    correct = (predicted == y_test).astype(np.float32)
    return {"accuracy": with_ci(correct, bootstrap=bootstrap, level=level), "correct": correct,
            "predicted": predicted.astype(np.float32), "threshold": float(threshold),
            "sign": sign}


def probe_directions(x_train_NxD, labels_train_N, x_test_MxD, labels_test_M, *,
                     l2: float | None = None, num_classes: int | None = None,
                     max_iters: int = 500, seed: int = 0, bootstrap: int = 1000,
                     level: float = 0.95, balanced: bool = False) -> dict:
    """One-vs-rest logistic probes: each class's weight vector in the input coordinates and its
    held-out accuracy.

    For each class c, the binary problem ``labels == c`` is fit by the project's probe
    (:func:`~repr_jax.eval.linear_probe.linear_probe` with ``kind="logistic"``: features
    standardised on train, ``mean CE + l2 / 2 ||W||^2``, L-BFGS). ``linear_probe`` returns only an
    accuracy, so this calls its solver (``logistic_weights``) and standardisation directly and
    keeps the weights; with ``l2`` given the numbers are ``linear_probe``'s exactly. With
    ``l2=None`` the penalty is chosen from ``LOGISTIC_GRID`` by accuracy on 10% of train held out
    (``default_rng(seed)``), as ``linear_probe`` does, and the probe is fit on the rest.
    ``balanced=True`` weighs each fit example by ``n / (2 n_class)`` (scikit-learn's
    ``class_weight="balanced"``) and chooses the penalty by balanced accuracy: a one-vs-rest
    probe of one concept among 25 otherwise learns the majority class.

    The direction of class c is ``(w_1 - w_0) / sd`` (the two-class softmax's logit difference,
    mapped back from standardised features), with bias ``b_1 - b_0 - mu . direction``: the
    probe predicts c where ``x . direction + bias > 0``.

    Returns ``{"directions_CxD", "bias_C", "l2_C", "accuracy"`` (C :class:`Estimate` over test
    examples) and ``"correct_CxM"`` (0/1)``}``. Time per class
    ``O(N D min(N, D) + min(N, D)^3 + iters N min(N, D))`` per penalty, memory
    ``O(N D + min(N, D)^2)`` (:func:`~repr_jax.eval.linear_probe.logistic_weights`).
    """
    x_train = jnp.asarray(x_train_NxD, jnp.float32)
    x_test = jnp.asarray(x_test_MxD, jnp.float32)
    labels_train, labels_test = np.asarray(labels_train_N), np.asarray(labels_test_M)
    if x_train.ndim != 2 or x_test.shape[1:] != x_train.shape[1:]:
        raise ValueError(f"probe_directions expects [N, D] features; got train {x_train.shape}, "
                         f"test {x_test.shape}")
    c = num_classes or int(max(labels_train.max(), labels_test.max())) + 1
    if l2 is None:
        perm = np.random.default_rng(seed).permutation(len(labels_train))
        n_val = max(1, len(perm) // 10)
        val, fit = perm[:n_val], perm[n_val:]
        x_fit, x_val = x_train[fit], x_train[val]
        labels_fit, labels_val = labels_train[fit], labels_train[val]
        xs_fit, xs_test, xs_val = standardize(x_fit, x_test, x_val)
    else:
        x_fit, labels_fit = x_train, labels_train
        xs_fit, xs_test = standardize(x_fit, x_test)
    mu_D = np.asarray(x_fit.mean(0), np.float64)
    sd_D = np.asarray(x_fit.std(0) + 1e-6, np.float64)  # standardize's scale
    lambdas = jnp.asarray(LOGISTIC_GRID if l2 is None else (l2,), jnp.float32)

    directions, biases, chosen, accuracies, corrects = [], [], [], [], []
    for k in range(c):
        y_Nx2 = jax.nn.one_hot(jnp.asarray(labels_fit == k, jnp.int32), 2)
        if balanced:  # rows scaled by their class weight: softmax CE is linear in the targets
            counts_2 = y_Nx2.sum(0)
            y_Nx2 = y_Nx2 * (len(labels_fit) / (2 * jnp.maximum(counts_2, 1)))[None, :]
        w_LxDx2, b_Lx2 = logistic_weights(xs_fit, y_Nx2, lambdas, max_iters=max_iters, tol=1e-4)
        dir_LxD = w_LxDx2[:, :, 1] - w_LxDx2[:, :, 0]
        bias_L = b_Lx2[:, 1] - b_Lx2[:, 0]
        best = 0
        if l2 is None:
            pred_LxV = xs_val @ dir_LxD.T + bias_L[None, :] > 0
            truth_Vx1 = jnp.asarray(labels_val == k)[:, None]
            right_LxV = pred_LxV == truth_Vx1
            if balanced:  # the mean of the two classes' recalls (a class absent counts 0.5)
                pos = jnp.sum(truth_Vx1)
                val_acc_L = 0.5 * (jnp.where(pos > 0, jnp.sum(right_LxV & truth_Vx1, 0)
                                             / jnp.maximum(pos, 1), 0.5)
                                   + jnp.where(pos < len(labels_val),
                                               jnp.sum(right_LxV & ~truth_Vx1, 0)
                                               / jnp.maximum(len(labels_val) - pos, 1), 0.5))
            else:
                val_acc_L = jnp.mean(right_LxV, axis=0)
            best = int(jnp.argmax(val_acc_L))
        correct = np.asarray((xs_test @ dir_LxD[best] + bias_L[best] > 0)
                             == jnp.asarray(labels_test == k), np.float32)
        direction = np.asarray(dir_LxD[best], np.float64) / sd_D
        directions.append(direction)
        biases.append(float(bias_L[best]) - float(mu_D @ direction))
        chosen.append(float(lambdas[best]))
        accuracies.append(with_ci(correct, bootstrap=bootstrap, level=level))
        corrects.append(correct)
    return {"directions_CxD": np.stack(directions).astype(np.float32),
            "bias_C": np.asarray(biases, np.float32), "l2_C": np.asarray(chosen),
            "accuracy": accuracies, "correct_CxM": np.stack(corrects)}


def shuffled_accuracy(x_train_NxD, y_train_N, x_test_MxD, y_test_M, *, method: str = "mean",
                      seed: int = 0, l2: float | None = None, bootstrap: int = 1000,
                      level: float = 0.95, balanced: bool = False) -> dict:
    """The shuffled-label control of a binary concept's held-out accuracy: a permutation test's
    null run, as scikit-learn's ``permutation_test_score`` permutes the labels before it
    cross-validates. The train labels and the test labels are each permuted within their split
    (``default_rng(seed)``; class counts kept), the direction is re-estimated from the permuted
    train labels as the real one is (``method="mean"``: difference of means with
    :func:`held_out_accuracy`'s midpoint threshold; ``"probe"``: :func:`probe_directions`), and
    scored against the permuted test labels. (Permuting only the train labels is not a null in few
    dimensions: a random direction still has a component along a strong real class difference, and
    one seed can land far from chance in either direction.)

    Returns ``{"accuracy"`` (an :class:`Estimate` over test examples), ``"chance"``,
    ``"correct"``, ``"labels"`` (the permuted test labels ``correct`` is scored against)``}``;
    ``balanced`` is passed to :func:`probe_directions`. ``chance`` is the accuracy of predictions
    independent of the labels at the
    same rates, ``q p + (1 - q)(1 - p)`` (q: predicted-positive rate, p: positive rate on test):
    ~0.5 for the midpoint threshold, the majority rate for a probe that learned nothing. Costs as
    the method's.
    """
    y_train = np.asarray(y_train_N).astype(bool)
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(y_train)
    y_test = rng.permutation(np.asarray(y_test_M).astype(bool))
    if method == "mean":
        direction = difference_of_means(x_train_NxD, shuffled.astype(np.int32), num_classes=2)[1]
        out = held_out_accuracy(direction, x_train_NxD, shuffled, x_test_MxD, y_test,
                                bootstrap=bootstrap, level=level)
        correct, accuracy = out["correct"], out["accuracy"]
    elif method == "probe":
        out = probe_directions(x_train_NxD, shuffled.astype(np.int32), x_test_MxD,
                               y_test.astype(np.int32), l2=l2, num_classes=2, seed=seed,
                               bootstrap=bootstrap, level=level, balanced=balanced)
        correct, accuracy = out["correct_CxM"][1], out["accuracy"][1]
    else:
        raise ValueError(f"shuffled_accuracy method={method!r}; choose from ('mean', 'probe')")
    return {"accuracy": accuracy, "chance": _chance(correct, y_test), "correct": correct,
            "labels": y_test}


def _chance(correct_M, y_test_M) -> float:
    """The accuracy of predictions independent of the labels ``y_test_M`` (bool) at the rates of
    those that scored ``correct_M``: ``q p + (1 - q)(1 - p)``. Time ``O(M)``."""
    predicted = np.where(np.asarray(correct_M) > 0, y_test_M, ~y_test_M)
    q, p = predicted.mean(), y_test_M.mean()
    return float(q * p + (1 - q) * (1 - p))


def balanced_accuracy(predicted_M, truth_M) -> jax.Array:
    """The mean of the recalls of the classes present in ``truth_M`` (0/1 or bool, ``[M]``; a
    class absent from a bootstrap resample is left out, as scikit-learn's
    ``balanced_accuracy_score`` averages the classes it sees). A JAX statistic for
    :func:`~repr_jax.eval.stats.with_ci`. Time ``O(M)``.

    >>> float(balanced_accuracy(np.array([1, 0, 0, 0]), np.array([1, 1, 0, 0])))
    0.75
    """
    fired, positive = jnp.asarray(predicted_M) > 0, jnp.asarray(truth_M) > 0
    n_pos, n_neg = positive.sum(), (~positive).sum()
    recall_pos = jnp.sum(fired & positive) / jnp.maximum(n_pos, 1)
    recall_neg = jnp.sum(~fired & ~positive) / jnp.maximum(n_neg, 1)
    return jnp.where(n_pos == 0, recall_neg,
                     jnp.where(n_neg == 0, recall_pos, (recall_pos + recall_neg) / 2))


LATENT_RULES = ("fires", "threshold")
LATENT_CHUNK = 512  # latents searched at once by the threshold rule (memory O(N x chunk))


def best_latent(z_train_NxL, y_train_N, z_test_MxL, y_test_M, *, rule: str = "fires",
                bootstrap: int = 1000, level: float = 0.95) -> dict:
    """The single latent (a column of ``z``, e.g. an SAE's activations) that best separates a
    binary concept as a one-number classifier, chosen on train and scored on test.

    Each latent predicts positive where its activation is above a threshold: with ``"fires"``
    (the default) the threshold is 0, i.e. where it fires (natural for TopK SAEs, whose latents
    are 0 unless among a row's k largest); with ``"threshold"`` each latent's own threshold is its
    best on train (the midpoint between two consecutive distinct train activations, the highest
    one among ties). The latent with the highest train balanced accuracy is chosen (the lowest
    index among ties), then its threshold's balanced accuracy on test is reported with a
    percentile bootstrap interval over test examples (:func:`balanced_accuracy`).

    Returns ``{"latent", "threshold", "train_balanced_accuracy", "balanced_accuracy"`` (an
    :class:`Estimate` when ``bootstrap``), ``"predicted"`` (``[M]`` bool), ``"rates"``
    (``(positives, negatives)``: the fraction of test positives and of test negatives above the
    threshold)``}``. Time ``O(N L)`` for ``"fires"`` (one count per latent), ``O(N L log N)`` for
    ``"threshold"`` (a sort per latent), plus ``O(M + R M)``; memory ``O(N L)`` (the input) and
    ``O(N LATENT_CHUNK)``.

    >>> z = np.array([[0., 2.], [0., 1.], [3., 0.], [1., 0.]])
    >>> r = best_latent(z, [1, 1, 0, 0], z, [1, 1, 0, 0], bootstrap=0)
    >>> r["latent"], r["train_balanced_accuracy"], r["balanced_accuracy"]
    (1, 1.0, 1.0)
    """
    if rule not in LATENT_RULES:
        raise ValueError(f"best_latent rule={rule!r}; choose from {LATENT_RULES}")
    z_train, z_test = np.asarray(z_train_NxL, np.float32), np.asarray(z_test_MxL, np.float32)
    y_train, y_test = np.asarray(y_train_N).astype(bool), np.asarray(y_test_M).astype(bool)
    if (z_train.ndim != 2 or z_test.ndim != 2 or z_train.shape[1] != z_test.shape[1]
            or y_train.shape != z_train.shape[:1] or y_test.shape != z_test.shape[:1]):
        raise ValueError(f"best_latent expects z [N, L], y [N], z [M, L], y [M]; got "
                         f"{z_train.shape}, {y_train.shape}, {z_test.shape}, {y_test.shape}")
    if y_train.all() or not y_train.any():
        raise ValueError("best_latent needs both classes in y_train")
    n_pos, n_neg = int(y_train.sum()), int((~y_train).sum())
    if rule == "fires":
        fires_NxL = (z_train > 0).astype(np.float32)
        tp_L = (y_train.astype(np.float32) @ fires_NxL).astype(np.int64)  # counts < 2^24: exact
        score_L = tp_L * n_neg + (n_neg - (fires_NxL.sum(0).astype(np.int64) - tp_L)) * n_pos
        latent = int(np.argmax(score_L))
        threshold, train_ba = 0.0, float(score_L[latent] / (2 * n_pos * n_neg))
    else:
        chance = n_pos * n_neg  # the score of predicting all, or nothing, positive
        best = (-1, 0, 0.0)  # (train score, latent, threshold)
        n = len(z_train)
        for start in range(0, z_train.shape[1], LATENT_CHUNK):
            z_NxC = z_train[:, start:start + LATENT_CHUNK].astype(np.float64)
            order_NxC = np.argsort(-z_NxC, axis=0, kind="stable")
            sorted_NxC = np.take_along_axis(z_NxC, order_NxC, axis=0)
            tp_NxC = np.cumsum(y_train[order_NxC], axis=0)  # positives among the top j + 1
            fp_NxC = np.arange(1, n + 1)[:, None] - tp_NxC
            score_NxC = tp_NxC * n_neg + (n_neg - fp_NxC) * n_pos
            score_NxC[:-1][sorted_NxC[:-1] == sorted_NxC[1:]] = -1  # no cut inside a tie
            score_NxC[-1] = chance  # everything above
            cut_C = np.argmax(score_NxC, axis=0)  # the highest threshold among a latent's ties
            score_C = np.maximum(score_NxC[cut_C, np.arange(len(cut_C))], chance)
            k = int(np.argmax(score_C))
            if score_C[k] > best[0]:
                j = cut_C[k]
                threshold = ((sorted_NxC[j, k] + sorted_NxC[j + 1, k]) / 2
                             if score_NxC[j, k] > chance
                             else sorted_NxC[0, k])  # none better than chance: nothing above
                best = (int(score_C[k]), start + k, float(threshold))
        score, latent, threshold = best
        train_ba = float(score / (2 * n_pos * n_neg))
    predicted = z_test[:, latent].astype(np.float64) > threshold
    rates = tuple(float(predicted[y_test == t].mean()) if (y_test == t).any() else math.nan
                  for t in (True, False))
    return {"latent": latent, "threshold": threshold, "train_balanced_accuracy": train_ba,
            "balanced_accuracy": with_ci((predicted.astype(np.float32),
                                          y_test.astype(np.float32)), balanced_accuracy,
                                         bootstrap=bootstrap, level=level),
            "predicted": predicted, "rates": rates}


# ----------------------------------------------------------------------------------------------
# The causal inner product and vector representations (Park et al. 2023, 2024)
# ----------------------------------------------------------------------------------------------

def causal_transform(gamma_VxD, *, ridge: float | None = None,
                     chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """``(mean_D, A_DxD)`` with ``g(y) = A (gamma(y) - mean)`` making the causal inner product
    Euclidean: Park et al. 2023's estimate of the causal inner product,
    ``<a, b>_C = a^T Cov(gamma)^-1 b``, as Park et al. 2024 use it:
    ``g(y) <- A (gamma(y) - E[gamma])``, ``A = Cov(gamma)^-1/2``, with ``E`` and ``Cov`` over the
    whole vocabulary, uniformly weighted, ``Cov`` with divisor V. ``A`` is the symmetric inverse
    square root ``Q diag(lambda^-1/2) Q^T`` (``Cov = Q diag(lambda) Q^T``), so ``Cov(g) = I``
    (divisor V).

    ``ridge``: ``A = (Cov + ridge * mean(lambda) I)^-1/2``. ``None`` adds nothing when the
    covariance has full rank and ``1e-6 * mean(lambda)`` (with a warning) when it is rank-deficient
    (an eigenvalue at or below ``D * eps * max(lambda)``); then ``Cov(g)`` is the identity only on
    the covariance's range.

    Returned in float64; ``g = (gamma - mean) @ A`` (``A`` is symmetric): see
    :func:`causal_coordinates`. Time ``O(V D^2 + D^3)``, memory ``O(chunk D + D^2)`` beyond the
    input (rows accumulated in float64 chunk by chunk).
    """
    v, d = np.shape(gamma_VxD)
    mean_D = np.zeros(d)
    for s in range(0, v, chunk):
        mean_D += np.asarray(gamma_VxD[s:s + chunk], np.float64).sum(0)
    mean_D /= v
    cov_DxD = np.zeros((d, d))
    for s in range(0, v, chunk):
        centred = np.asarray(gamma_VxD[s:s + chunk], np.float64) - mean_D
        cov_DxD += centred.T @ centred
    cov_DxD /= v
    evals_D, q_DxD = np.linalg.eigh(cov_DxD)
    evals_D = np.maximum(evals_D, 0.0)
    if ridge is None:
        deficient = evals_D.min() <= d * np.finfo(np.float64).eps * evals_D.max()
        ridge = 1e-6 if deficient else 0.0
        if deficient:
            warnings.warn("causal_transform: Cov(gamma) is rank-deficient; adding a ridge of "
                          "1e-6 x its mean eigenvalue")
    evals_D = evals_D + ridge * evals_D.mean()
    if evals_D.min() <= 0:
        raise ValueError("causal_transform: Cov(gamma) is singular; pass ridge > 0")
    return mean_D, (q_DxD / np.sqrt(evals_D)) @ q_DxD.T


def causal_coordinates(gamma_VxD, mean_D, a_DxD) -> np.ndarray:
    """``g = (gamma - mean) A^T`` row by row (Park et al. 2024's ``g(y)``), float32.
    Time ``O(V D^2)``, memory ``O(V D)``."""
    return ((np.asarray(gamma_VxD, np.float64) - mean_D) @ np.asarray(a_DxD).T).astype(np.float32)


def _lda(g_WxD: jax.Array) -> jax.Array:
    """:func:`lda_direction`'s estimate, traceable (used under ``vmap`` by the bootstraps)."""
    w, d = g_WxD.shape
    mean_D = g_WxD.mean(0)
    centred_WxD = g_WxD - mean_D[None, :]
    rtol = max(w, d) * jnp.finfo(jnp.float32).eps  # torch.linalg.pinv's default cut-off
    if w > d:  # primal: Cov^+ m from the D x D covariance
        evals, vecs_DxD = jnp.linalg.eigh(centred_WxD.T @ centred_WxD)
        keep = evals > rtol * evals.max()
        inv = jnp.where(keep, 1.0 / jnp.where(keep, evals, 1.0), 0.0)
        u_D = vecs_DxD @ (inv * (vecs_DxD.T @ mean_D))
    else:  # dual: (X^T X)^+ m = X^T (X X^T)^+2 X m from the W x W Gram matrix
        evals, vecs_WxW = jnp.linalg.eigh(centred_WxD @ centred_WxD.T)
        keep = evals > rtol * evals.max()
        inv = jnp.where(keep, 1.0 / jnp.where(keep, evals, 1.0), 0.0)
        u_D = centred_WxD.T @ (vecs_WxW @ (inv ** 2 * (vecs_WxW.T @ (centred_WxD @ mean_D))))
    g_tilde_D = u_D / jnp.maximum(jnp.linalg.norm(u_D), jnp.finfo(jnp.float32).tiny)
    return (g_tilde_D @ mean_D) * g_tilde_D


_lda_jit = jax.jit(_lda)


def lda_direction(g_WxD) -> np.ndarray:
    """The vector representation ``l_w`` of a binary feature from its words' transformed
    unembeddings ``g_WxD`` (rows: the words of ``Y(w)``, in :func:`causal_transform`'s
    coordinates): Park et al. 2024's LDA-like estimator (the one their experiments use; section
    and equation numbers not pinned down here)

        g_tilde = Cov(g_w)^+ E[g_w] / ||Cov(g_w)^+ E[g_w]||,    l_w = (g_tilde . E[g_w]) g_tilde,

    ``g_tilde`` maximises ``(u . E[g_w])^2 / u^T Cov(g_w) u`` (Fisher's criterion for one
    class against the origin: the words project far out and alike), and ``l_w`` is scaled so
    that the mean word projects onto it with length ``g_tilde . E[g_w]``.
    ``Cov^+`` is the Moore-Penrose pseudo-inverse with ``torch.linalg.pinv``'s default relative
    cut-off (eigenvalues at or below ``max(W, D) * eps32 * max`` count as zero); the covariance's
    divisor cancels in the normalisation. With ``W <= D`` words ``Cov`` has rank ``W - 1``, and
    ``g_tilde`` lies in the span of the centred words.

    Time ``O(W D min(W, D) + min(W, D)^3)`` (the covariance's eigendecomposition when ``W > D``,
    else the ``W x W`` Gram's), memory ``O(W D + min(W, D)^2)``; float32.

    >>> g = np.array([[2., 2.], [0., 0.], [2., 1.], [0., 1.]])  # mean (1, 1)
    >>> # Cov ~ [[2, 1], [1, 1]], Cov^-1 (1, 1) ~ (0, 1), l = ((0, 1) . (1, 1)) (0, 1)
    >>> bool(np.allclose(lda_direction(g), [0.0, 1.0], atol=1e-5))
    True
    """
    g = jnp.asarray(g_WxD, jnp.float32)
    if g.ndim != 2 or g.shape[0] < 2:
        raise ValueError(f"lda_direction expects [W, D] word vectors, W >= 2; got {g.shape}")
    return np.asarray(_lda_jit(g))


@functools.partial(jax.jit, static_argnames=("statistic", "num_resamples"))
def _resampled_groups(statistic, groups, num_resamples: int, seed) -> jax.Array:
    """``statistic(*groups)`` on ``num_resamples`` stratified resamples: each group (word set)
    drawn with replacement from itself, independently, keys ``fold_in(PRNGKey(seed), r)``.
    One resample at a time (a scan): XLA's CPU runtime deadlocked on the same statistic
    vectorised over resamples (the eigendecompositions of 8 or more at once; jaxlib 0.10.2),
    and the scan is as fast there."""
    key = jax.random.PRNGKey(seed)

    def one(r):
        keys = jax.random.split(jax.random.fold_in(key, r), len(groups))
        return statistic(*(g[jax.random.randint(k, (g.shape[0],), 0, g.shape[0])]
                           for g, k in zip(groups, keys)))
    return jax.lax.map(one, jnp.arange(num_resamples))


def _group_bootstrap(statistic, groups, *, bootstrap: int, level: float,
                     seed: int) -> list[Estimate]:
    """Point estimates of a vector-valued ``statistic`` with normal bootstrap intervals
    (:func:`~repr_jax.eval.stats.normal_interval`: the point -+ 1.96 resample sd) from word-set
    resamples (:func:`_resampled_groups`; ``nan`` bounds when ``bootstrap=0``). Resampled word
    sets hold duplicates, which shift these covariance-whitened statistics: on SmolLM2 the
    percentile intervals of hierarchy cosines missed their own points, and the bias-corrected
    ones collapsed where every resample fell on one side. The shift is a finite-sample bias the
    point estimate shares (see :func:`hierarchy_cosine`), so compare a statistic with its
    control, which is estimated the same way. Time ``O(R x the statistic's)``, memory the
    statistic's."""
    groups = tuple(jnp.asarray(g, jnp.float32) for g in groups)
    point = np.atleast_1d(np.asarray(jax.jit(statistic)(*groups)))
    if not bootstrap:
        return [Estimate(p) for p in point]
    samples = _resampled_groups(statistic, groups, bootstrap, seed).reshape(bootstrap, -1)
    samples = np.asarray(samples)
    return [Estimate(p, *normal_interval(samples[:, i], float(p), level))
            for i, p in enumerate(point)]


def _hierarchy_cos(g_parent_WxD, g_child_UxD):
    l_parent, l_child = _lda(g_parent_WxD), _lda(g_child_UxD)
    diff = l_child - l_parent
    tiny = jnp.finfo(jnp.float32).tiny
    return (l_parent @ diff) / jnp.maximum(jnp.linalg.norm(l_parent) * jnp.linalg.norm(diff),
                                           tiny)


def hierarchy_cosine(g_parent_WxD, g_child_UxD, g_vocab_VxD, *, bootstrap: int = 1000,
                     level: float = 0.95, seed: int = 0) -> dict[str, Estimate]:
    """Hierarchical orthogonality (Park et al. 2024's theorem, Thm. 8 in the arXiv version as we
    recall it, its first part: for ``z`` subordinate to ``w``, ``l_w`` is orthogonal to
    ``l_z - l_w`` under the causal inner product): the cosine between ``l_parent`` and
    ``l_child - l_parent``, each :func:`lda_direction` of its word set, in
    :func:`causal_transform`'s coordinates (where the causal inner product is the dot product).
    The theorem predicts ~0. Finite word sets bias the estimate: ``g_tilde`` errs by an angle of
    ~``sqrt(D / W)``, which shortens ``l`` by ~``D / W``, the child's (fewer words) more, leaving
    a ``-l_parent`` part in ``l_child - l_parent`` (-0.1 with 400 and 300 words in D = 16;
    -0.02 with 2,000 and 1,500).

    ``"cosine"``: that cosine with a normal bootstrap interval over words (the
    parent's and the child's word sets resampled independently, ``bootstrap`` times). ``"control"``: the same with the
    child's words replaced by a random set of as many words drawn without replacement from
    ``g_vocab_VxD`` (``default_rng(seed)``; the set is drawn once, then resampled as the child's
    is). A random set's ``l`` is short (``E[g] ~ 0`` over the vocabulary), so its control cosine
    sits near -1 rather than 0.

    Time ``O(R (W D min(W, D) + U D min(U, D) + min(W, D)^3 + min(U, D)^3))`` for R resamples,
    memory ``O((W + U) D + min(W, D)^2)``.
    """
    parent = np.asarray(g_parent_WxD, np.float32)
    child = np.asarray(g_child_UxD, np.float32)
    vocab = np.asarray(g_vocab_VxD, np.float32)
    if (parent.ndim != 2 or child.shape[1:] != parent.shape[1:]
            or vocab.shape[1:] != parent.shape[1:]):
        raise ValueError(f"hierarchy_cosine expects [W, D], [U, D], [V, D] word vectors; got "
                         f"{parent.shape}, {child.shape}, {vocab.shape}")
    if len(vocab) < len(child):
        raise ValueError(f"the vocabulary sample ({len(vocab)} words) must hold at least as many "
                         f"words as the child ({len(child)})")
    random_UxD = vocab[np.random.default_rng(seed).choice(len(vocab), len(child), replace=False)]
    kw = dict(bootstrap=bootstrap, level=level, seed=seed)
    (cosine,) = _group_bootstrap(_hierarchy_cos, (parent, child), **kw)
    (control,) = _group_bootstrap(_hierarchy_cos, (parent, random_UxD), **kw)
    return {"cosine": cosine, "control": control}


def _simplex_stats(*groups):
    """``[ratio, spread]`` of the k vectors ``l_i``: the smallest over the largest singular value
    of ``[l_i - l_1]_{i>1}``, and the largest singular value over the mean ``||l_i||``."""
    l_KxD = jnp.stack([_lda(g) for g in groups])
    diffs = l_KxD[1:] - l_KxD[:1]
    s = jnp.sqrt(jnp.maximum(jnp.linalg.eigvalsh(diffs @ diffs.T), 0.0))  # ascending
    tiny = jnp.finfo(jnp.float32).tiny
    ratio = s[0] / jnp.maximum(s[-1], tiny)
    spread = s[-1] / jnp.maximum(jnp.linalg.norm(l_KxD, axis=1).mean(), tiny)
    return jnp.stack([ratio, spread])


def simplex_test(g_categories: Sequence, *, bootstrap: int = 1000, level: float = 0.95,
                 seed: int = 0) -> dict[str, Estimate]:
    """Categorical concepts as simplices (Park et al. 2024's polytope theorem, as we read it: the
    vector representations ``l_1..l_k`` of k mutually exclusive values of a categorical concept,
    e.g. *mammal, bird, fish, reptile*, form a (k-1)-simplex, i.e. are affinely independent).

    ``g_categories``: k arrays ``[W_i, D]`` of the categories' words (in
    :func:`causal_transform`'s coordinates), ``3 <= k <= D + 1``. Each ``l_i`` is
    :func:`lda_direction` of its words. Returns, each with an interval over words (every
    category's words resampled on their own):

    * ``"ratio"``: ``s_min / s_max`` of the ``(k-1) x D`` matrix of differences ``l_i - l_1``:
      0 for collapsed (affinely dependent, e.g. collinear) categories, ``1 / sqrt(k)`` for a
      regular simplex, 1 when the differences are orthogonal and of equal length (a scale-free
      shape number);
    * ``"spread"``: ``s_max / mean_i ||l_i||``, how far apart the vertices are relative to their
      length;
    * ``"control_ratio"``, ``"control_spread"``: the same with the pooled words' category labels
      shuffled (``default_rng(seed)``, sizes kept). Shuffled categories share one mean, so their
      differences are estimation noise: the spread falls towards 0, while the ratio of noise
      vectors in high D can stay large, so read the ratio beside the spread.

    Time ``O(R sum_i (W_i D min(W_i, D) + min(W_i, D)^3) + R k^2 D)``, memory
    ``O(sum_i W_i D + max_i min(W_i, D)^2)``.
    """
    groups = [np.asarray(g, np.float32) for g in g_categories]
    k = len(groups)
    d = groups[0].shape[1] if groups and groups[0].ndim == 2 else None
    if d is None or any(g.ndim != 2 or g.shape[1] != d for g in groups):
        raise ValueError(f"simplex_test expects k arrays [W_i, D]; got "
                         f"{[g.shape for g in groups]}")
    if not 3 <= k <= d + 1:
        raise ValueError(f"simplex_test needs 3 <= k <= D + 1 categories; got k = {k}, D = {d}")
    pooled = np.concatenate(groups)[np.random.default_rng(seed).permutation(
        sum(len(g) for g in groups))]
    shuffled = np.split(pooled, np.cumsum([len(g) for g in groups])[:-1])
    kw = dict(bootstrap=bootstrap, level=level, seed=seed)
    ratio, spread = _group_bootstrap(_simplex_stats, groups, **kw)
    control_ratio, control_spread = _group_bootstrap(_simplex_stats, shuffled, **kw)
    return {"ratio": ratio, "spread": spread, "control_ratio": control_ratio,
            "control_spread": control_spread}


# ----------------------------------------------------------------------------------------------
# The evaluator: concept directions on every layer (eval.evaluators=('concepts',))
# ----------------------------------------------------------------------------------------------

def _concept_codes(labels_N, concepts: Sequence) -> np.ndarray:
    """``[N]`` int32: ``k`` where the label is ``concepts[k]``, ``len(concepts)`` elsewhere (the
    examples of no chosen concept, which stay in every concept's "rest"). Time ``O(C N)``."""
    labels = np.asarray(labels_N).reshape(-1)
    codes = np.full(labels.shape, len(concepts), np.int32)
    for k, value in enumerate(concepts):
        codes[labels == value] = k
    return codes


def _concept_correct(method: str, x_train_NxD, codes_train_N, x_test_MxD, codes_test_M, c: int,
                     seed: int) -> np.ndarray:
    """``[M, C]`` 0/1: whether each of the C concepts' one-vs-rest direction (``"mean"``:
    :func:`difference_of_means` thresholded by :func:`held_out_accuracy`; ``"probe"``:
    :func:`probe_directions`) classifies each test example right. Code ``c`` (no concept) is
    only ever "rest". One call of each function serves every concept, and gives concept k's
    numbers exactly as a binary call on ``labels == concept k`` does (up to float summation
    order in the class means)."""
    if method == "probe":
        return probe_directions(x_train_NxD, codes_train_N, x_test_MxD, codes_test_M,
                                num_classes=c, seed=seed, bootstrap=0)["correct_CxM"].T
    others = int(np.any(codes_train_N == c))
    means_CxD = difference_of_means(x_train_NxD, codes_train_N, num_classes=c + others)
    return np.stack([held_out_accuracy(means_CxD[k], x_train_NxD, codes_train_N == k,
                                       x_test_MxD, codes_test_M == k, bootstrap=0)["correct"]
                     for k in range(c)], axis=1)


CONCEPT_ROWS = {"mean": ("concept_accuracy_mean", "concept_accuracy_shuffled", "concept_chance"),
                "probe": ("concept_accuracy_probe", "concept_accuracy_probe_shuffled",
                          "concept_chance_probe")}


def concept_accuracies(x_train_NxD, labels_train_N, x_test_MxD, labels_test_M,
                       concepts: Sequence, *, probe: bool = True, seed: int = 0,
                       bootstrap: int = 1000, level: float = 0.95) -> dict[str, float]:
    """The mean over ``concepts`` (label values, each one-vs-rest against every other example)
    of the held-out accuracy of each concept's direction, and of its shuffled-label control:
    :class:`Concepts`'s rows for one layer's features.

    ``concept_accuracy_mean``: the difference of means thresholded at the midpoint
    (:func:`held_out_accuracy`); ``concept_accuracy_probe`` (with ``probe``): the logistic probe
    (:func:`probe_directions`, penalty chosen on 10% of train, ``default_rng(seed)``). Each
    interval is a bootstrap over test examples, all concepts jointly: the statistic is the mean
    of the ``[M, C]`` correctness matrix, bootstrapped as the mean of its row means (the same
    resamples, ``O(R M)`` rather than ``O(R M C)``). ``concept_accuracy_shuffled`` /
    ``..._probe_shuffled``: :func:`shuffled_accuracy`'s control for every concept at once (the
    train and the test labels each permuted within their split by ``default_rng(seed)``, train
    first; as every concept's binary labels are its labels' indicator, concept k's control is
    ``shuffled_accuracy(..., labels == k, seed=seed)``'s), with its chance level
    ``concept_chance`` / ``concept_chance_probe`` (the mean over concepts of
    :func:`shuffled_accuracy`'s ``chance``, a plain float).

    Every concept needs examples in and out of it in train. Time ``O(C (N + M) D)`` for the
    means, and with ``probe`` twice (real and control) C one-vs-rest probes,
    ``O(C (N D min(N, D) + min(N, D)^3 + G iters N min(N, D)))`` (G = ``len(LOGISTIC_GRID)``);
    memory ``O((N + M) D + min(N, D)^2 + M C)``; the intervals ``O(R M)`` each.
    """
    concepts = list(concepts)
    c = len(concepts)
    x_train = np.asarray(x_train_NxD, np.float32)
    x_test = np.asarray(x_test_MxD, np.float32)
    codes_train, codes_test = _concept_codes(labels_train_N, concepts), _concept_codes(
        labels_test_M, concepts)
    rng = np.random.default_rng(seed)  # as shuffled_accuracy draws: train, then test
    shuffled_train, shuffled_test = rng.permutation(codes_train), rng.permutation(codes_test)
    rows: dict[str, float] = {}
    for method in ("mean", "probe") if probe else ("mean",):
        real = _concept_correct(method, x_train, codes_train, x_test, codes_test, c, seed)
        control = _concept_correct(method, x_train, shuffled_train, x_test, shuffled_test, c,
                                   seed)
        accuracy, shuffled, chance = CONCEPT_ROWS[method]
        rows[accuracy] = with_ci(real.mean(1), bootstrap=bootstrap, level=level)
        rows[shuffled] = with_ci(control.mean(1), bootstrap=bootstrap, level=level)
        rows[chance] = float(np.mean([_chance(control[:, k], shuffled_test == k)
                                      for k in range(c)]))
    return rows


@config
class ConceptsOptions:
    """``eval.concepts.*``: the options of :class:`Concepts` (its keyword arguments)."""
    max_concepts: int = static(32, ">0", "classes read as concepts (one-vs-rest), the most "
                                         "frequent in train first")
    min_examples: int = static(2, ">0", "a class with fewer examples in train or in test (or "
                                        "fewer outside it in train) is skipped")
    probe: bool = static(True, doc="also the logistic probe's directions and their control "
                                   "(most of the cost)")
    seed: int = static(0, ">=0", "the control's label permutations and the probe's validation "
                                 "split")


class Concepts(Evaluator):
    """Concept directions on every encoder layer's pooled features and on the final embedding:
    for each class (a concept, one-vs-rest) the held-out accuracy of its difference-of-means
    direction and of its logistic probe's, and the shuffled-label control of each.

    The concepts are the ``max_concepts`` classes most frequent in train (ties: the smaller
    label) among those with ``min_examples`` in train, in test and outside the class in train.
    Rows ``{where}/{metric}``, ``where`` = ``layer_{i}`` or ``embedding`` as
    :class:`~repr_jax.eval.layerwise.Layerwise` names them (only ``embedding`` when the
    embedder has no layers): ``concept_accuracy_mean``, ``concept_accuracy_shuffled``,
    ``concept_chance``, and with ``probe`` ``concept_accuracy_probe``,
    ``concept_accuracy_probe_shuffled``, ``concept_chance_probe``
    (:func:`concept_accuracies`). A dataset without labels, with one class, or with no class
    that has ``min_examples`` gives no rows and a one-line warning.

    Cost (N train and M test examples, width D of a layer, C concepts, L layers with the
    embedding, G = 7 probe penalties, R resamples): time ``O(L C (N + M) D)`` for the means;
    the probes (``probe=True``, most of it) ``O(L C (N D min(N, D) + min(N, D)^3
    + G iters N min(N, D)))``, twice (real and control); the intervals ``O(L R M)``. Memory:
    every layer's features, cached by the embedder, ``O(L (N + M) D)``, plus
    ``O(N D + min(N, D)^2 + M C)`` for one layer's solve.
    """

    name = "concepts"
    options = ConceptsOptions

    def __init__(self, embedder: Embedder, *, max_concepts: int = 32, min_examples: int = 2,
                 probe: bool = True, seed: int = 0, bootstrap: int = 1000):
        super().__init__(embedder)
        self.max_concepts, self.min_examples = max_concepts, min_examples
        self.probe, self.seed, self.bootstrap = probe, seed, bootstrap

    def concepts(self, labels_train_N, labels_test_M) -> list:
        """The label values read as concepts (see the class); ``[]``, with a one-line warning
        saying why, when there are none. Time ``O((N + M) log(N + M))``."""
        y_train, y_test = np.asarray(labels_train_N), np.asarray(labels_test_M)
        if y_train.ndim != 1 or y_test.ndim != 1:
            warnings.warn(f"concepts: labels must be one class per example; got shapes "
                          f"{y_train.shape} and {y_test.shape}: no rows", stacklevel=2)
            return []
        values, n_train = np.unique(y_train, return_counts=True)
        if len(np.unique(np.concatenate([values, np.unique(y_test)]))) < 2:
            warnings.warn(f"concepts: the labels hold one class ({values[:1].tolist()}): no "
                          f"concept to tell from the rest, no rows", stacklevel=2)
            return []
        test_values, test_counts = np.unique(y_test, return_counts=True)
        at = np.clip(np.searchsorted(test_values, values), 0, max(len(test_values) - 1, 0))
        n_test = (np.where(test_values[at] == values, test_counts[at], 0) if len(test_values)
                  else np.zeros_like(n_train))
        m = self.min_examples
        ok = (n_train >= m) & (n_test >= m) & (len(y_train) - n_train >= m)
        order = np.lexsort((values, -n_train))  # most frequent in train first, then by label
        chosen = [values[i].item() for i in order if ok[i]][:self.max_concepts]
        if not chosen:
            shown = ", ".join(f"{values[i].item()}: {n_train[i]}/{n_test[i]}" for i in order[:8])
            warnings.warn(f"concepts: no class has eval.concepts.min_examples={m} examples in "
                          f"train, in test and outside it in train; examples per class "
                          f"(train/test) {shown}{', ...' if len(values) > 8 else ''} of "
                          f"{len(values)} classes, {len(y_train)} train examples: no rows",
                          stacklevel=2)
        return chosen

    def features(self, variables) -> Iterator[tuple[str, Any, Any]]:
        """``(where, train features, test features)``: each layer's (the view
        :class:`~repr_jax.eval.layerwise.Layerwise` runs on, named as it names them) or, without
        layers, the embedding's."""
        x_train, x_test = self.embedder.splits["train"]["x"], self.embedder.splits["test"]["x"]
        if not self.embedder.has_layers:
            yield ("embedding", self.embedder.embed(variables, x_train),
                   self.embedder.embed(variables, x_test))
            return
        n = len(self.embedder.embed(variables, x_test, "layers"))
        for i in range(n):
            view = self.embedder.view(lambda t, i=i: t[i], which="layers")
            yield ("embedding" if i == n - 1 else f"layer_{i}", view.embed(variables, x_train),
                   view.embed(variables, x_test))

    def run(self, variables) -> Iterator[tuple[str, float]]:
        splits = self.embedder.splits
        if any("label" not in splits.get(s, {}) for s in ("train", "test")):
            warnings.warn("concepts: the dataset has no labels (its train and test splits need "
                          "'label'): no rows", stacklevel=2)
            return
        y_train, y_test = (np.asarray(splits[s]["label"][:]) for s in ("train", "test"))
        chosen = self.concepts(y_train, y_test)
        if not chosen:
            return
        for where, f_train, f_test in self.features(variables):
            rows = concept_accuracies(f_train, y_train, f_test, y_test, chosen, probe=self.probe,
                                      seed=self.seed, bootstrap=self.bootstrap)
            for metric, value in rows.items():
                yield f"{where}/{metric}", value
