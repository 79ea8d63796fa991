"""MLP encoder: flattens its input, then ``Dense → norm → ReLU`` blocks."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax

from repr_jax.config import ConfigError, EncoderConfig, config, static
from repr_jax.encoders.family import Family
from repr_jax.encoders.layers import norm_layer

VARIANTS = {
    "tiny": dict(widths=(16,)),
    "S": dict(widths=(256, 256)),
    "B": dict(widths=(512, 512, 512)),
}


class MLP(nn.Module):
    """Args: ``x`` of shape ``[B, ...]``. Returns ``(embedding [B, E], features)``.

    ``features``: ``layers`` (each block's output), ``pooled`` (the last block's output) and
    ``pre_head`` (the same, before the optional final linear ``embed_dim`` projection).
    """
    widths: Sequence[int] = (256, 256)
    embed_dim: int = 0
    norm: str = "layer"

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False):
        h = x.reshape(x.shape[0], -1)
        layers = []
        for i, width in enumerate(self.widths):
            h = nn.Dense(width, use_bias=self.norm != "batch", name=f"dense{i}")(h)
            h = norm_layer(self.norm, train=train, name=f"norm{i}")(h)
            h = nn.relu(h)
            layers.append(h)
        emb = nn.Dense(self.embed_dim, name="embed")(h) if self.embed_dim else h
        return emb, {"layers": tuple(layers), "pooled": h, "pre_head": h}


@config
class MLPConfig(EncoderConfig):
    """``encoder.name=mlp``: its widths and normalisation (``variant`` replaces the widths)."""
    widths: tuple[int, ...] = static((32, 64, 128), doc="hidden widths, one per block")
    norm: str = static("batch", ("batch", "layer", "none"), "normalisation after each Dense")

    def _validate(self):
        check_widths(self.widths)


def check_widths(widths) -> None:
    if not widths or any(w <= 0 for w in widths):
        raise ConfigError(f"encoder.widths must be a non-empty tuple of positive ints, "
                          f"got {widths!r}")


def _fields(e: MLPConfig, **_) -> dict:
    return {"norm": e.norm, **({} if e.variant else {"widths": e.widths})}


FAMILY = Family(MLP, VARIANTS, MLPConfig, _fields, default_variant=None)
