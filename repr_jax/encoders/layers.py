"""Small building blocks shared by encoder families."""

from __future__ import annotations

import itertools
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def norm_layer(kind: str, *, train: bool, name: str | None = None):
    """``batch`` (running stats in ``batch_stats``), ``layer`` or ``none`` normalisation."""
    if kind == "batch":
        return nn.BatchNorm(use_running_average=not train, momentum=0.9, name=name)
    if kind == "layer":
        return nn.LayerNorm(name=name)
    if kind == "none":
        return lambda x: x
    raise ValueError(f"unknown norm {kind!r}; choose from: 'batch', 'layer', 'none'")


class PatchConv(nn.Module):
    """``nn.Conv`` (stride 1, SAME padding) computed as one matrix multiply over extracted patches
    (im2col): the same parameters (``kernel [*window, C_in, C_out]``, ``bias``, same initialisers,
    so the same values from the same key) and the same outputs.

    Why it exists: under ``vmap`` over per-member weights (a population), ``nn.Conv`` becomes a
    grouped convolution, which XLA's CPU backend runs many times slower than the separate
    convolutions; this stays a batched matrix multiply.
    """
    features: int
    kernel_size: Sequence[int]
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        window = tuple(self.kernel_size)
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (*window, x.shape[-1], self.features))
        spatial = x.shape[1:-1]
        # SAME padding as XLA: k - 1 in total, the smaller half before.
        xp = jnp.pad(x, [(0, 0)] + [((k - 1) // 2, k - 1 - (k - 1) // 2) for k in window]
                     + [(0, 0)])
        patches = jnp.stack(
            [xp[(slice(None), *(slice(o, o + n) for o, n in zip(offsets, spatial)))]
             for offsets in itertools.product(*(range(k) for k in window))], axis=-2)
        y = patches.reshape(*patches.shape[:-2], -1) @ kernel.reshape(-1, self.features)
        if self.use_bias:
            bias = self.param("bias", nn.initializers.zeros, (self.features,))
            y = y + bias.reshape((1,) * (y.ndim - 1) + (-1,))
        return y
