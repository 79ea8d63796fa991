"""An encoder family written the way a contributor adds one: this file (the module, its sizes,
its config section, how the section becomes the module's fields) plus one line in
``repr_jax.encoders.FAMILIES`` — here the test's ``monkeypatch.setitem``."""

from __future__ import annotations

import flax.linen as nn
import jax

from repr_jax.config import EncoderConfig, config, static
from repr_jax.encoders.family import Family

VARIANTS = {"tiny": dict(width=8)}


class RandomFeatures(nn.Module):
    """One Dense layer and a fixed nonlinearity: ``(embedding [B, E], features)``."""
    width: int = 16
    activation: str = "tanh"
    embed_dim: int = 0

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False):
        del train
        h = getattr(nn, self.activation)(nn.Dense(self.width, name="dense")(
            x.reshape(x.shape[0], -1)))
        emb = nn.Dense(self.embed_dim, name="embed")(h) if self.embed_dim else h
        return emb, {"layers": (h,), "pooled": h, "pre_head": h}


@config
class RandomFeaturesConfig(EncoderConfig):
    width: int = static(0, ">=0", "features (0 = the variant's)")
    activation: str = static("tanh", ("tanh", "relu"), "the nonlinearity")


def _fields(e: RandomFeaturesConfig, **_) -> dict:
    return {"activation": e.activation, **({"width": e.width} if e.width else {})}


FAMILY = Family(RandomFeatures, VARIANTS, RandomFeaturesConfig, _fields)
