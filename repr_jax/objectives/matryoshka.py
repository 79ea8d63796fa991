"""Matryoshka wrappers: train every prefix of the embedding (and every layer) at once.

Both wrap any objective above and keep its reduction (per-example in, per-example out).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp


def _is_embedding(a) -> bool:
    """Floating arrays with a feature axis (ndim >= 2); labels, scores and scalars are not."""
    return getattr(a, "ndim", 0) >= 2 and jnp.issubdtype(a.dtype, jnp.floating)


def _truncate(args, dim: int):
    """Cuts every embedding argument to its first ``dim`` features."""
    return tuple(a[..., :dim] if _is_embedding(a) else a for a in args)


def matryoshka(loss_fn: Callable, dims: Sequence[int], weights: Sequence[float] | None = None
               ) -> Callable:
    """Matryoshka representation learning (Kusupati et al. 2022).

    Returns ``f(*args, **kwargs) = sum_i w_i * loss_fn(*args_truncated_to(dims[i]), **kwargs)``, where
    every embedding argument (floating, ``ndim >= 2``) is cut to its first ``dims[i]`` features;
    ``weights`` default to 1. With all ``dims`` this is sentence-transformers' ``MatryoshkaLoss``
    (``n_dims_per_step=-1``).

    >>> import jax.numpy as jnp
    >>> from repr_jax.objectives import info_nce
    >>> f = matryoshka(info_nce, dims=(2, 4))
    >>> f(jnp.eye(4), jnp.eye(4)).shape
    (4,)
    """
    dims = tuple(int(d) for d in dims)
    weights = tuple(1.0 for _ in dims) if weights is None else tuple(weights)
    if len(weights) != len(dims) or not dims or min(dims) <= 0:
        raise ValueError(f"matryoshka: need positive dims and one weight per dim; got dims={dims}, "
                         f"weights={weights}")

    def loss(*args, **kwargs):
        widths = {a.shape[-1] for a in args if _is_embedding(a)}
        if widths and max(dims) > min(widths):
            raise ValueError(f"matryoshka: dims {dims} exceed the embedding width {min(widths)}")
        return sum(w * loss_fn(*_truncate(args, d), **kwargs) for d, w in zip(dims, weights))

    return loss


def matryoshka_2d(loss_fn: Callable, dims: Sequence[int], weights: Sequence[float] | None = None, *,
                  last_layer_weight: float = 1.0, prior_layers_weight: float = 1.0,
                  kl_div_weight: float = 1.0, kl_temperature: float = 0.3) -> Callable:
    """2D Matryoshka sentence embeddings (2DMSE; Li et al. 2024): over layers *and* prefixes.

    Returns ``f(layers, **kwargs)`` where ``layers`` is a sequence over encoder layers (the last is the
    final layer) of argument tuples for ``loss_fn`` (e.g. ``[(q_l, d_l) for l in range(L)]``, each
    pooled at that layer). With ``m = matryoshka(loss_fn, dims, weights)``:

    ``last_layer_weight * m(*layers[-1])
      + sum_{l < L-1} prior_layers_weight * m(*layers[l]) / (1 + l) / (L - 1)
      + sum_{l < L-1} kl_div_weight * kl_temperature * KL(softmax(e_L / t) || softmax(e_l / t))``

    where ``e_l`` stacks all of layer ``l``'s embedding arguments (full width) along the batch and the
    KL is averaged over rows ("batchmean"). This is sentence-transformers' ``Matryoshka2dLoss`` with
    every layer and dimension used each step (``n_layers_per_step = n_dims_per_step = -1``); its
    default samples one of each per step, an unbiased-in-expectation subset of these terms.
    """
    inner = matryoshka(loss_fn, dims, weights)

    def embeddings(args):
        return jnp.concatenate([a for a in args if _is_embedding(a)], axis=0)

    def loss(layers, **kwargs):
        layers = list(layers)
        if len(layers) < 1:
            raise ValueError("matryoshka_2d needs at least one layer")
        total = last_layer_weight * inner(*layers[-1], **kwargs)
        n_prior = len(layers) - 1
        if kl_temperature > 0:
            final_log_p = jax.nn.log_softmax(embeddings(layers[-1]) / kl_temperature, axis=-1)
        for idx, args in enumerate(layers[:-1]):
            total = total + inner(*args, **kwargs) / (1 + idx) / n_prior * prior_layers_weight
            if kl_temperature > 0:
                log_q = jax.nn.log_softmax(embeddings(args) / kl_temperature, axis=-1)
                kl = jnp.sum(jnp.exp(final_log_p) * (final_log_p - log_q)) / log_q.shape[0]
                total = total + kl * kl_temperature * kl_div_weight
        return total

    return loss
