"""Interventions on an encoder's blocks without changing its code: a Flax method interceptor
replaces the output of one block (``layer_<L>`` of a text_transformer or decoder_lm, ``block<L>``
of a vit) by a function of it, inside whatever is traced, so a jitted forward pass with an
intervention is as pure as one without. What splices an SAE's reconstruction in
(:mod:`repr_jax.train.splice`) and what steers a model (:mod:`repr_jax.train.steer`) use."""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

BLOCKS = {"text_transformer": "layer_{}", "decoder_lm": "layer_{}", "vit": "block{}"}


def replacing_block(family: str, layer: int, fn: Callable[[jax.Array], jax.Array]):
    """A context in which the output ``[B, T, D]`` of block ``layer`` of a ``family`` encoder is
    ``fn`` of it (every module named as that block is: a two-tower model's towers both are)."""
    name = BLOCKS[family].format(layer)

    def interceptor(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if context.method_name == "__call__" and context.module.name == name:
            return fn(out)
        return out
    return nn.intercept_methods(interceptor)


def adding(direction: jax.Array, alpha: jax.Array, where_BxT: jax.Array | None = None
           ) -> Callable[[jax.Array], jax.Array]:
    """``h -> h + alpha * direction`` (activation addition, Turner et al. 2023): ``direction``
    ``[D]`` (every row) or ``[B, D]`` (one per row), ``alpha`` a scalar (traced: one compilation
    for every value); at every position, or with ``where_BxT`` (bool) at those tokens only."""
    def add(h_BxTxD):
        d = (alpha * direction).astype(h_BxTxD.dtype)
        d = d[None, None, :] if d.ndim == 1 else d[:, None, :]
        if where_BxT is None:
            return h_BxTxD + d
        return jnp.where(where_BxT[..., None], h_BxTxD + d, h_BxTxD)
    return add
