"""Gradient cache (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup"): the loss and gradients of an in-batch-negative objective over a large batch, with
the encoder activations of one chunk in memory at a time.

An in-batch-negative loss couples every example of the batch only through the embeddings. So:
(1) embed the whole batch chunk by chunk without keeping activations, (2) compute the loss and its
gradient with respect to the embeddings on the full batch (cheap: ``[B, D]`` arrays), (3) re-embed
each chunk with a VJP and pull its slice of the embedding gradient back to the parameters,
accumulating. The result equals ``jax.value_and_grad`` of the full-batch loss (tested to 1e-5)
at the cost of a second forward pass.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp


def grad_cache_value_and_grad(embed_fns: Sequence[Callable[[Any, jax.Array], jax.Array]],
                              loss_fn: Callable[..., jax.Array], params: Any,
                              inputs: Sequence[jax.Array], *, chunk_size: int
                              ) -> tuple[jax.Array, Any]:
    """``(loss, grads)`` of ``loss_fn(params, *[f(params, x) for f, x in zip(embed_fns, inputs)])``.

    Args:
      embed_fns: one function per input (e.g. the two towers), ``f(params, x[c]) -> [c, D]``; each
        must treat examples independently (no batch statistics: use LayerNorm or eval-mode BN).
      loss_fn: ``loss_fn(params, *embeddings) -> scalar``, the full-batch objective (it may read
        parameters of its own, such as a learned temperature).
      params: the parameter pytree both read.
      inputs: arrays with the same leading batch size ``B``, divisible by ``chunk_size``.
      chunk_size: examples embedded (and differentiated) at once.
    """
    batch = inputs[0].shape[0]
    if any(x.shape[0] != batch for x in inputs) or len(inputs) != len(embed_fns):
        raise ValueError(f"grad cache: one input per embedding function, all with batch {batch}; "
                         f"got {[x.shape for x in inputs]} for {len(embed_fns)} functions")
    if batch % chunk_size:
        raise ValueError(f"grad cache: batch {batch} is not divisible by chunk_size {chunk_size}")
    n = batch // chunk_size

    def chunks(x):
        return x.reshape(n, chunk_size, *x.shape[1:])

    # (1) embeddings of the whole batch, one chunk at a time, no activations kept.
    embeddings = [jax.lax.stop_gradient(
        jax.lax.map(lambda xc, f=f: f(params, xc), chunks(x)).reshape(batch, -1))
        for f, x in zip(embed_fns, inputs)]
    # (2) the loss and its gradient w.r.t. the embeddings (and the loss's own parameters).
    loss, (loss_param_grads, *embedding_grads) = jax.value_and_grad(
        loss_fn, argnums=tuple(range(len(inputs) + 1)))(params, *embeddings)

    # (3) chunk by chunk: re-embed and pull the embedding gradient back to the parameters.
    def body(acc, chunk):
        xs, gs = chunk
        for f, x, g in zip(embed_fns, xs, gs):
            _, vjp = jax.vjp(lambda p, f=f, x=x: f(p, x), params)
            acc = jax.tree.map(jnp.add, acc, vjp(g.reshape(chunk_size, -1))[0])
        return acc, None

    grads, _ = jax.lax.scan(body, loss_param_grads,
                            ([chunks(x) for x in inputs], [chunks(g) for g in embedding_grads]))
    return loss, grads
