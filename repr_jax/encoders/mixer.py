"""MLP-Mixer (Tolstikhin et al. 2021): patch embedding, then blocks of token-mixing and
channel-mixing MLPs (pre-LN), final LayerNorm and global average pooling."""

from __future__ import annotations

import flax.linen as nn
import jax

from repr_jax.config import EncoderConfig, config, static
from repr_jax.encoders import precision
from repr_jax.encoders.family import Family, patch_check, sizes

VARIANTS = {
    "tiny": dict(width=32, depth=2, tokens_mlp_dim=16, channels_mlp_dim=64, patch_size=4),
    "S": dict(width=512, depth=8, tokens_mlp_dim=256, channels_mlp_dim=2048, patch_size=16),
    "B": dict(width=768, depth=12, tokens_mlp_dim=384, channels_mlp_dim=3072, patch_size=16),
}


class _Mlp(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x):
        dense = precision.dense_kwargs()  # the mixed-precision policy's products
        return nn.Dense(x.shape[-1], name="out", **dense)(
            nn.gelu(nn.Dense(self.hidden, name="in", **dense)(x)))


class Mixer(nn.Module):
    """Args: images ``[B, H, W, C]``. Returns ``(embedding, features)`` with ``tokens``, ``layers``,
    ``pooled`` and ``pre_head``."""
    width: int = 768
    depth: int = 12
    tokens_mlp_dim: int = 384
    channels_mlp_dim: int = 3072
    patch_size: int = 16
    embed_dim: int = 0
    remat: bool = False  # recompute each MLP's activations in the backward pass

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False):
        del train
        if x.ndim != 4:
            raise ValueError(f"mixer expects images [B, H, W, C]; got {x.shape}")
        p = self.patch_size
        if x.shape[1] % p or x.shape[2] % p:
            raise ValueError(f"mixer: image {x.shape[1]}x{x.shape[2]} is not divisible by "
                             f"patch_size {p}")
        x = nn.Conv(self.width, (p, p), (p, p), padding="VALID", name="stem")(x)
        x = x.reshape(x.shape[0], -1, self.width)
        layers = []
        mlp = nn.remat(_Mlp) if self.remat else _Mlp
        for i in range(self.depth):
            y = nn.LayerNorm(name=f"block{i}_ln1")(x).swapaxes(1, 2)
            x = x + mlp(self.tokens_mlp_dim, name=f"block{i}_token_mixing")(y).swapaxes(1, 2)
            y = nn.LayerNorm(name=f"block{i}_ln2")(x)
            x = x + mlp(self.channels_mlp_dim, name=f"block{i}_channel_mixing")(y)
            layers.append(x)
        tokens = nn.LayerNorm(name="pre_head_ln")(x)
        pooled = tokens.mean(axis=1)
        emb = (nn.Dense(self.embed_dim, name="embed", **precision.dense_kwargs())(pooled)
               if self.embed_dim else pooled)
        return emb, {"tokens": tokens, "layers": tuple(layers), "pooled": pooled,
                     "pre_head": pooled}


@config
class MixerConfig(EncoderConfig):
    """``encoder.name=mixer``: sizes that override the variant's (0 = the variant's)."""
    width: int = static(0, ">=0", "channels per token (0 = the variant's)")
    depth: int = static(0, ">=0", "blocks (0 = the variant's)")
    patch_size: int = static(0, ">=0", "patch side (0 = the variant's)")


def _fields(e: MixerConfig, **_) -> dict:
    return sizes(e, {"width": "width", "depth": "depth", "patch_size": "patch_size"})


FAMILY = Family(Mixer, VARIANTS, MixerConfig, _fields, reads="images", remat=True,
                check=patch_check(lambda e: VARIANTS[e.variant or "tiny"]["patch_size"]),
                mixed_precision=True)
