"""ResNet (He et al. 2016) in the flax/torchvision layout: basic blocks (18/34) or bottlenecks (50),
BatchNorm with running statistics in ``batch_stats``, and a small-image stem option (3×3, stride 1,
no max-pool) for 8×8–32×32 inputs."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax

from repr_jax.config import EncoderConfig, config
from repr_jax.encoders.family import Family

VARIANTS = {
    "tiny": dict(stage_sizes=(1, 1), num_filters=8, bottleneck=False, small_images=True),
    "18": dict(stage_sizes=(2, 2, 2, 2), num_filters=64, bottleneck=False),
    "34": dict(stage_sizes=(3, 4, 6, 3), num_filters=64, bottleneck=False),
    "50": dict(stage_sizes=(3, 4, 6, 3), num_filters=64, bottleneck=True),
}
VARIANTS["S"], VARIANTS["B"] = VARIANTS["18"], VARIANTS["50"]


class _Block(nn.Module):
    filters: int
    strides: int
    bottleneck: bool

    @nn.compact
    def __call__(self, x, train: bool):  # train positional: static under nn.remat
        def bn(name, zero=False):
            return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5,
                                scale_init=nn.initializers.zeros if zero else
                                nn.initializers.ones, name=name)

        residual = x
        s = (self.strides, self.strides)
        if self.bottleneck:
            y = nn.relu(bn("bn1")(nn.Conv(self.filters, (1, 1), use_bias=False, name="conv1")(x)))
            y = nn.relu(bn("bn2")(nn.Conv(self.filters, (3, 3), s, padding=1, use_bias=False,
                                          name="conv2")(y)))
            y = bn("bn3", zero=True)(nn.Conv(self.filters * 4, (1, 1), use_bias=False,
                                             name="conv3")(y))
            out = self.filters * 4
        else:
            y = nn.relu(bn("bn1")(nn.Conv(self.filters, (3, 3), s, padding=1, use_bias=False,
                                          name="conv1")(x)))
            y = bn("bn2", zero=True)(nn.Conv(self.filters, (3, 3), padding=1, use_bias=False,
                                             name="conv2")(y))
            out = self.filters
        if residual.shape[-1] != out or self.strides != 1:
            residual = bn("proj_bn")(nn.Conv(out, (1, 1), s, use_bias=False,
                                             name="proj_conv")(residual))
        return nn.relu(y + residual)


class ResNet(nn.Module):
    """Args: images ``[B, H, W, C]``. Returns ``(embedding [B, E], features)`` with ``layers`` (each
    stage's output), ``tokens`` (last stage positions ``[B, P, C]``), ``pooled`` and ``pre_head``."""
    stage_sizes: Sequence[int] = (2, 2, 2, 2)
    num_filters: int = 64
    bottleneck: bool = False
    small_images: bool = False
    embed_dim: int = 0
    remat: bool = False  # recompute each block's activations in the backward pass

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False):
        if x.ndim != 4:
            raise ValueError(f"resnet expects images [B, H, W, C]; got {x.shape}")
        if self.small_images:
            x = nn.Conv(self.num_filters, (3, 3), padding=1, use_bias=False, name="stem")(x)
        else:
            x = nn.Conv(self.num_filters, (7, 7), (2, 2), padding=3, use_bias=False,
                        name="stem")(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5,
                                 name="stem_bn")(x))
        if not self.small_images:
            x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        layers = []
        block = nn.remat(_Block, static_argnums=(2,)) if self.remat else _Block
        for i, n_blocks in enumerate(self.stage_sizes):
            for j in range(n_blocks):
                x = block(self.num_filters * 2 ** i, 2 if (i > 0 and j == 0) else 1,
                          self.bottleneck, name=f"stage{i}_block{j}")(x, train)
            layers.append(x)
        tokens = x.reshape(x.shape[0], -1, x.shape[-1])
        pooled = tokens.mean(axis=1)
        emb = nn.Dense(self.embed_dim, name="embed")(pooled) if self.embed_dim else pooled
        return emb, {"tokens": tokens, "layers": tuple(layers), "pooled": pooled,
                     "pre_head": pooled}


@config
class ResNetConfig(EncoderConfig):
    """``encoder.name=resnet``: sized by ``encoder.variant`` alone (18, 34, 50, ...; tiny)."""


def _fields(e: ResNetConfig, **_) -> dict:
    del e
    return {}


FAMILY = Family(ResNet, VARIANTS, ResNetConfig, _fields, reads="images", remat=True)
