"""Small building blocks shared by encoder families."""

from __future__ import annotations

import functools
import itertools
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from repr_jax.backend import cpu_tuned


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


def _channels_last(ndim: int) -> lax.ConvDimensionNumbers:
    """``[N, *spatial, C]`` inputs and outputs, ``[*window, C_in, C_out]`` kernels (flax's)."""
    act = (0, ndim - 1, *range(1, ndim - 1))
    return lax.ConvDimensionNumbers(act, (ndim - 1, ndim - 2, *range(ndim - 2)), act)


def conv(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
         dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
         preferred_element_type=None):
    """``lax.conv_general_dilated`` (the signature ``nn.Conv(conv_general_dilated=...)`` calls)
    whose gradient, for plain channels-last convolutions (stride 1, no dilation, no groups), is
    itself written as channels-last convolutions where the CPU tricks are on
    (:func:`repr_jax.backend.cpu_tuned`); elsewhere it is ``lax.conv_general_dilated`` itself.

    Why it exists: XLA's CPU backend runs a convolution with its fast (Eigen) kernel only in the
    channels-last layout, and rewrites other layouts into it only at a program's top level. The
    kernel gradient of a convolution is, as JAX derives it, a convolution in another layout
    (batch and feature dimensions swapped), so inside a loop (``lax.map``/``scan``: a population
    trained member after member, gradient accumulation) it falls to a naive loop (bench/README.md).
    The values are those of ``lax.conv_general_dilated`` (same operations)."""
    ndim = lhs.ndim
    plain = (all(s == 1 for s in window_strides)
             and all(d == 1 for d in (lhs_dilation or ()) + (rhs_dilation or ()))
             and feature_group_count == 1 and batch_group_count == 1
             and preferred_element_type is None
             and lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
             == _channels_last(ndim))
    if not (plain and cpu_tuned()):
        return lax.conv_general_dilated(
            lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
            feature_group_count, batch_group_count, precision, preferred_element_type)
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(lhs.shape[1:-1], rhs.shape[:-2], window_strides, padding)
    return _conv_channels_last(lhs, rhs, tuple(tuple(p) for p in padding), precision)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _conv_channels_last(x, w, pads, precision):
    return lax.conv_general_dilated(x, w, (1,) * len(pads), pads, precision=precision,
                                    dimension_numbers=_channels_last(x.ndim))


def _conv_channels_last_fwd(x, w, pads, precision):
    return _conv_channels_last(x, w, pads, precision), (x, w)


def _conv_channels_last_bwd(pads, precision, residuals, dy):
    x, w = residuals
    n = x.ndim - 2  # spatial dimensions
    ones, dims = (1,) * n, _channels_last(x.ndim)
    window = w.shape[:n]
    # dx: the output gradient convolved with the flipped kernel (C_in and C_out swapped).
    flipped = jnp.swapaxes(jnp.flip(w, axis=tuple(range(n))), -1, -2)
    dx = lax.conv_general_dilated(dy, flipped, ones, [(k - 1 - lo, k - 1 - hi) for k, (lo, hi)
                                                      in zip(window, pads)],
                                  precision=precision, dimension_numbers=dims)
    # dw[*k, i, o] = sum over batch and positions of x_padded[b, p + k, i] dy[b, p, o]: the
    # input's channels as the batch, its batch as the features, the output gradient as the kernel.
    spatial = tuple(range(1, n + 1))
    dw = lax.conv_general_dilated(jnp.transpose(x, (n + 1, *spatial, 0)),
                                  jnp.transpose(dy, (*spatial, 0, n + 1)), ones, pads,
                                  precision=precision, dimension_numbers=dims)
    return dx, jnp.transpose(dw, (*spatial, 0, n + 1))


_conv_channels_last.defvjp(_conv_channels_last_fwd, _conv_channels_last_bwd)


@jax.custom_vjp
def gelu_exact(x: jax.Array) -> jax.Array:
    """``jax.nn.gelu(x, approximate=False)`` (``x · Φ(x)``, BERT's erf GELU) whose backward
    reuses the forward's ``Φ(x)`` and needs one exponential, ``Φ(x) + x · φ(x)``: autodiff of
    ``erfc`` re-evaluates it per consumer in the backward pass (the largest elementwise cost of a
    MiniLM train step on XLA:CPU). Same values as ``jax.nn.gelu``; O(N) in the elements."""
    return x * _normal_cdf(x)


def _normal_cdf(x):
    # Hugging Face's form, 0.5 (1 + erf(x / sqrt 2)): XLA's erf is one rational polynomial, its
    # erfc an exponential and a division besides
    half = jnp.asarray(0.5, x.dtype)
    return half + half * lax.erf(x * jnp.asarray(0.7071067811865476, x.dtype))


def _gelu_fwd(x):
    cdf = _normal_cdf(x)
    return x * cdf, (x, cdf)


def _gelu_bwd(residuals, g):
    x, cdf = residuals
    pdf = jnp.exp(-0.5 * x * x) * jnp.asarray(0.3989422804014327, x.dtype)  # 1 / sqrt(2 pi)
    return (g * (cdf + x * pdf),)


gelu_exact.defvjp(_gelu_fwd, _gelu_bwd)
