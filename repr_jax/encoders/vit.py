"""Vision Transformer (Dosovitskiy et al. 2021) as in big_vision: patch embedding, learned or
2-D sin-cos positions, optional CLS token, pre-LN blocks (LayerNorm eps 1e-6, GELU MLP)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from repr_jax.config import EncoderConfig, config, static
from repr_jax.encoders import precision
from repr_jax.encoders.attention import attend
from repr_jax.encoders.family import Family, patch_check, sizes

VARIANTS = {
    "tiny": dict(width=32, depth=2, num_heads=2, mlp_dim=64, patch_size=4),
    "Ti": dict(width=192, depth=12, num_heads=3, mlp_dim=768, patch_size=16),
    "S": dict(width=384, depth=12, num_heads=6, mlp_dim=1536, patch_size=16),
    "B": dict(width=768, depth=12, num_heads=12, mlp_dim=3072, patch_size=16),
}


def sincos_2d(h: int, w: int, width: int, temperature: float = 10_000.0) -> np.ndarray:
    """Fixed 2-D sin-cos position embeddings ``[h * w, width]`` (MoCo v3 / big_vision)."""
    if width % 4:
        raise ValueError(f"sincos positions need a width divisible by 4, got {width}")
    y, x = np.mgrid[:h, :w]
    omega = 1.0 / temperature ** (np.arange(width // 4) / (width // 4 - 1 or 1))
    y = y.reshape(-1)[:, None] * omega[None]
    x = x.reshape(-1)[:, None] * omega[None]
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1).astype(np.float32)


class SelfAttention(nn.Module):
    """Multi-head self-attention over ``[B, N, D]`` with an optional key mask ``[B, N]``: flax's
    ``MultiHeadDotProductAttention`` (the same parameters, initialisation and result), computed
    with tokens as one ``[B * N, D]`` matrix in the projections and
    :func:`repr_jax.encoders.attention.attend` (heads leading in the scores: fewer transposes on
    XLA:CPU; bench/README.md); its products follow the mixed-precision policy."""
    num_heads: int

    @nn.compact
    def __call__(self, x_BxNxD, mask_BxN=None):
        b, n, d = x_BxNxD.shape
        h, dh = self.num_heads, d // self.num_heads
        x_TxD = x_BxNxD.reshape(b * n, d)

        def heads(name):  # [B, N, H, Dh]
            y = nn.DenseGeneral((h, dh), name=name, **precision.dense_kwargs())(x_TxD)
            return y.reshape(b, n, h, dh)

        keep = (None if mask_BxN is None else
                nn.make_attention_mask(mask_BxN, mask_BxN).astype(bool))
        ctx = attend(heads("query"), heads("key"), heads("value"), mask=keep).reshape(b * n, h, dh)
        return nn.DenseGeneral(d, axis=(-2, -1), name="out", **precision.dense_kwargs())(
            ctx).reshape(b, n, d)


class EncoderBlock(nn.Module):
    """Pre-LN transformer block over ``[B, N, D]`` with an optional key mask ``[B, N]``."""
    num_heads: int
    mlp_dim: int
    eps: float = 1e-6

    @nn.compact
    def __call__(self, x, mask=None):
        y = nn.LayerNorm(self.eps, name="ln1")(x)
        x = x + SelfAttention(self.num_heads, name="attn")(y, mask)
        # The MLP sees tokens as one [B * N, D] matrix: XLA:CPU's weight-gradient dots over a
        # single batch dimension are faster than over two (bench/README.md).
        y = nn.LayerNorm(self.eps, name="ln2")(x).reshape(-1, x.shape[-1])
        dense = precision.dense_kwargs()
        y = nn.Dense(self.mlp_dim, name="mlp_in", **dense)(y)
        y = nn.Dense(x.shape[-1], name="mlp_out", **dense)(nn.gelu(y))
        return x + y.reshape(x.shape)


class ViT(nn.Module):
    """Args: images ``[B, H, W, C]``. Returns ``(embedding, features)`` with ``tokens`` (patch tokens
    after the final LayerNorm), ``layers`` (each block's output), ``pooled`` and ``pre_head``."""
    width: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    patch_size: int = 16
    posemb: str = "learn"  # or "sincos2d"
    pool_type: str = "cls"  # or "gap" (mean of patch tokens)
    embed_dim: int = 0
    remat: bool = False  # recompute each block's activations in the backward pass

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False):
        del train
        if x.ndim != 4:
            raise ValueError(f"vit expects images [B, H, W, C]; got {x.shape}")
        b, hh, ww, _ = x.shape
        p = self.patch_size
        if hh % p or ww % p:
            raise ValueError(f"vit: image {hh}x{ww} is not divisible by patch_size {p}")
        if self.width % self.num_heads:
            raise ValueError(f"vit: width {self.width} is not divisible by {self.num_heads} heads")
        x = nn.Conv(self.width, (p, p), (p, p), padding="VALID", name="embedding")(x)
        gh, gw = x.shape[1:3]
        x = x.reshape(b, gh * gw, self.width)
        if self.posemb == "learn":
            x = x + self.param("pos_embedding", nn.initializers.normal(0.02),
                               (1, gh * gw, self.width))
        elif self.posemb == "sincos2d":
            x = x + jnp.asarray(sincos_2d(gh, gw, self.width))[None]
        else:
            raise ValueError(f"vit posemb {self.posemb!r}; choose from: 'learn', 'sincos2d'")
        if self.pool_type == "cls":
            cls = self.param("cls", nn.initializers.zeros, (1, 1, self.width))
            x = jnp.concatenate([jnp.tile(cls, (b, 1, 1)), x], axis=1)
        layers = []
        block = nn.remat(EncoderBlock) if self.remat else EncoderBlock
        for i in range(self.depth):
            x = block(self.num_heads, self.mlp_dim, name=f"block{i}")(x)
            layers.append(x)
        x = nn.LayerNorm(1e-6, name="encoder_norm")(x)
        if self.pool_type == "cls":
            pooled, tokens = x[:, 0], x[:, 1:]
        elif self.pool_type == "gap":
            pooled, tokens = x.mean(axis=1), x
        else:
            raise ValueError(f"vit pool_type {self.pool_type!r}; choose from: 'cls', 'gap'")
        emb = (nn.Dense(self.embed_dim, name="embed", **precision.dense_kwargs())(pooled)
               if self.embed_dim else pooled)
        return emb, {"tokens": tokens, "layers": tuple(layers), "pooled": pooled,
                     "pre_head": pooled}


@config
class ViTConfig(EncoderConfig):
    """``encoder.name=vit``: sizes that override the variant's (0 = the variant's)."""
    width: int = static(0, ">=0", "token width (0 = the variant's)")
    depth: int = static(0, ">=0", "blocks (0 = the variant's)")
    num_heads: int = static(0, ">=0", "attention heads (0 = the variant's)")
    mlp_dim: int = static(0, ">=0", "MLP width (0 = the variant's)")
    patch_size: int = static(0, ">=0", "patch side (0 = the variant's)")


SIZES = {"width": "width", "depth": "depth", "num_heads": "num_heads", "mlp_dim": "mlp_dim",
         "patch_size": "patch_size"}


def _fields(e: ViTConfig, **_) -> dict:
    return sizes(e, SIZES)


FAMILY = Family(ViT, VARIANTS, ViTConfig, _fields, reads="images", remat=True,
                check=patch_check(lambda e: VARIANTS[e.variant or "tiny"]["patch_size"]),
                mixed_precision=True)
