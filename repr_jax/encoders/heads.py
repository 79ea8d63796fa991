"""Projection and prediction heads used by the SSL methods."""

from __future__ import annotations

import flax.linen as nn
import jax

from repr_jax.encoders.layers import norm_layer


class MLPHead(nn.Module):
    """``Dense(hidden) → norm → ReLU → Dense(out)``; ``hidden=0`` makes it one linear layer.

    SimCLR's projector is ``norm="none"``; SimSiam/BYOL-style heads use ``norm="batch"``.
    """
    out_dim: int
    hidden: int = 0
    norm: str = "none"

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False) -> jax.Array:
        if self.hidden:
            x = nn.Dense(self.hidden, use_bias=self.norm != "batch", name="hidden")(x)
            x = norm_layer(self.norm, train=train, name="norm")(x)
            x = nn.relu(x)
        return nn.Dense(self.out_dim, name="out")(x)
