"""Small convolutional encoder for 1-D signals ``[B, L]`` / ``[B, L, C]`` and images ``[B, H, W, C]``.

Each block is ``Conv(k) → norm → ReLU`` followed by 2× max pooling (except after the last block,
and only while the spatial size allows it); the last block is mean-pooled over space.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax

from repr_jax.config import EncoderConfig, config, static
from repr_jax.encoders.family import Family
from repr_jax.encoders.layers import PatchConv, conv, norm_layer
from repr_jax.encoders.mlp import check_widths

VARIANTS = {
    "tiny": dict(widths=(8, 16)),
    "S": dict(widths=(32, 64, 128)),
    "B": dict(widths=(64, 128, 256, 512)),
}


class CNN(nn.Module):
    """Args: ``x`` of shape ``[B, L]`` (1-D signal), ``[B, L, C]`` or ``[B, H, W, C]``.

    Returns ``(embedding [B, E], features)`` with ``tokens`` (the last block's spatial positions,
    ``[B, P, C]``), ``layers`` (each block's output), ``pooled`` (spatial mean of the last block) and
    ``pre_head``.
    """
    widths: Sequence[int] = (32, 64, 128)
    kernel_size: int = 5
    embed_dim: int = 0
    norm: str = "batch"
    im2col: bool = False  # convolutions as patch matmuls (layers.PatchConv): fast when vmapped


    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False):
        if x.ndim == 2:
            x = x[..., None]  # [B, L] signal -> one channel
        spatial = x.ndim - 2
        h, layers = x, []
        for i, width in enumerate(self.widths):
            # No bias before BatchNorm: it would be cancelled, and Adam would amplify its noise gradient.
            window, bias = (self.kernel_size,) * spatial, self.norm != "batch"
            h = (PatchConv(width, window, use_bias=bias, name=f"conv{i}") if self.im2col else
                 nn.Conv(width, window, padding="SAME", use_bias=bias, name=f"conv{i}",
                         conv_general_dilated=conv))(h)
            h = norm_layer(self.norm, train=train, name=f"norm{i}")(h)
            h = nn.relu(h)
            layers.append(h)
            if i < len(self.widths) - 1 and min(h.shape[1:-1]) >= 4:
                h = nn.max_pool(h, (2,) * spatial, strides=(2,) * spatial)
        tokens = h.reshape(h.shape[0], -1, h.shape[-1])
        pooled = tokens.mean(axis=1)
        emb = nn.Dense(self.embed_dim, name="embed")(pooled) if self.embed_dim else pooled
        return emb, {"tokens": tokens, "layers": tuple(layers), "pooled": pooled,
                     "pre_head": pooled}


@config
class CNNConfig(EncoderConfig):
    """``encoder.name=cnn``: its channels, kernel, normalisation and convolution kind."""
    widths: tuple[int, ...] = static((32, 64, 128), doc="conv channels, one per block "
                                                        "(variant replaces them)")
    kernel_size: int = static(5, ">0", "convolution kernel (a side, for images)")
    norm: str = static("batch", ("batch", "layer", "none"), "normalisation after each conv")
    conv: str = static("auto", ("auto", "xla", "im2col"), "convolutions: XLA's, or patch matmuls "
                       "(im2col: fast when vmapped); auto = im2col in populations whose members "
                       "are vmapped together (train.population_chunk)")

    def _validate(self):
        check_widths(self.widths)


def _fields(e: CNNConfig, *, population: bool = False, **_) -> dict:
    return {"norm": e.norm, "kernel_size": e.kernel_size,
            "im2col": e.conv == "im2col" or (e.conv == "auto" and population),
            **({} if e.variant else {"widths": e.widths})}


def _check(e: CNNConfig, input_shape: tuple[int, ...], dataset_name: str) -> None:
    spatial = input_shape if len(input_shape) == 1 else input_shape[:-1]
    if e.kernel_size > min(spatial):
        raise ValueError(f"encoder.kernel_size={e.kernel_size} is larger than the inputs of "
                         f"{dataset_name!r} ({'x'.join(map(str, spatial))}); use at most "
                         f"{min(spatial)}")


FAMILY = Family(CNN, VARIANTS, CNNConfig, _fields, default_variant=None, check=_check)
