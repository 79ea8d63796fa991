"""Gradient cache (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup"): the loss and gradients of an in-batch-negative objective over a large batch, with
the encoder activations of one chunk in memory at a time.

An in-batch-negative loss couples every example of the batch only through the embeddings. So:
(1) embed the whole batch chunk by chunk without keeping activations, (2) compute the loss and its
gradient with respect to the embeddings on the full batch (cheap: ``[B, D]`` arrays), (3) re-embed
each chunk with a VJP and pull its slice of the embedding gradient back to the parameters,
accumulating. The result equals ``jax.value_and_grad`` of the full-batch loss (tested to 1e-5)
at the cost of a second forward pass.

:func:`grad_cached` packages this as a function with a custom VJP, so it drops into any
``jax.value_and_grad`` (the train step, gradient accumulation, populations) unchanged: that is how
``train.grad_cache_chunk`` works.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np


def _check(embed_fns, inputs, chunk_size) -> int:
    batch = inputs[0].shape[0]
    if any(x.shape[0] != batch for x in inputs) or len(inputs) != len(embed_fns):
        raise ValueError(f"grad cache: one input per embedding function, all with batch {batch}; "
                         f"got {[x.shape for x in inputs]} for {len(embed_fns)} functions")
    if batch % chunk_size:
        raise ValueError(f"grad cache: batch {batch} is not divisible by chunk_size {chunk_size}")
    return batch // chunk_size


def _zero_cotangent(tree: Any) -> Any:
    """Zero cotangents for inputs that are not differentiated (float0 for integer leaves)."""
    def zero(x):
        x = jnp.asarray(x)
        if jnp.issubdtype(x.dtype, jnp.inexact):
            return jnp.zeros_like(x)
        return np.zeros(x.shape, jax.dtypes.float0)
    return jax.tree.map(zero, tree)


def grad_cached(embed_fns: Sequence[Callable[[Any, jax.Array], jax.Array]],
                loss_fn: Callable[..., jax.Array], *, chunk_size: int
                ) -> Callable[[Any, Sequence[jax.Array], Any], jax.Array]:
    """``f(params, inputs, aux) = loss_fn(params, aux, *[g(params, x) for g, x in zip(embed_fns,
    inputs)])`` whose gradient with respect to ``params`` is computed the gradient-cache way.

    Args:
      embed_fns: one function per input (e.g. the two views, or the two towers),
        ``g(params, x[c]) -> [c, D]``; each must treat examples independently (no batch
        statistics: LayerNorm or no normalisation).
      loss_fn: ``loss_fn(params, aux, *embeddings) -> scalar``, the full-batch objective (it may
        read parameters of its own, such as a learned temperature).
      chunk_size: examples embedded (and differentiated) at once; divides the batch.

    ``inputs`` and ``aux`` (hyperparameters, labels: any pytree) are not differentiated: their
    cotangents are zero, so nothing upstream of them may depend on ``params``.
    """
    @jax.custom_vjp
    def f(params, inputs, aux):
        _check(embed_fns, inputs, chunk_size)
        return loss_fn(params, aux, *[g(params, x) for g, x in zip(embed_fns, inputs)])

    def chunks(x, n):
        return x.reshape(n, x.shape[0] // n, *x.shape[1:])

    def fwd(params, inputs, aux):
        n = _check(embed_fns, inputs, chunk_size)
        batch = inputs[0].shape[0]
        # (1) embeddings of the whole batch, one chunk at a time, no activations kept.
        embeddings = [jax.lax.map(lambda xc, g=g: g(params, xc), chunks(x, n)).reshape(batch, -1)
                      for g, x in zip(embed_fns, inputs)]
        # (2) the loss and its gradient w.r.t. the embeddings (and the loss's own parameters).
        loss, (param_grads, *embedding_grads) = jax.value_and_grad(
            lambda p, *e: loss_fn(p, aux, *e), argnums=tuple(range(len(inputs) + 1)))(
            params, *embeddings)
        return loss, (params, inputs, aux, param_grads, embedding_grads)

    def bwd(residuals, g_loss):
        params, inputs, aux, param_grads, embedding_grads = residuals
        n = _check(embed_fns, inputs, chunk_size)

        # (3) chunk by chunk: re-embed and pull the embedding gradient back to the parameters.
        def body(acc, chunk):
            xs, gs = chunk
            for g, x, ge in zip(embed_fns, xs, gs):
                _, vjp = jax.vjp(lambda p, g=g, x=x: g(p, x), params)
                acc = jax.tree.map(jnp.add, acc, vjp(ge.reshape(x.shape[0], -1))[0])
            return acc, None

        grads, _ = jax.lax.scan(body, param_grads, ([chunks(x, n) for x in inputs],
                                                    [chunks(e, n) for e in embedding_grads]))
        grads = jax.tree.map(lambda t: (g_loss * t).astype(t.dtype), grads)
        return grads, _zero_cotangent(inputs), _zero_cotangent(aux)

    f.defvjp(fwd, bwd)
    return f


def grad_cache_value_and_grad(embed_fns: Sequence[Callable[[Any, jax.Array], jax.Array]],
                              loss_fn: Callable[..., jax.Array], params: Any,
                              inputs: Sequence[jax.Array], *, chunk_size: int
                              ) -> tuple[jax.Array, Any]:
    """``(loss, grads)`` of ``loss_fn(params, *[f(params, x) for f, x in zip(embed_fns, inputs)])``
    by :func:`grad_cached` (``loss_fn`` here takes no ``aux``)."""
    f = grad_cached(embed_fns, lambda p, aux, *e: loss_fn(p, *e), chunk_size=chunk_size)
    return jax.value_and_grad(f)(params, tuple(inputs), None)
