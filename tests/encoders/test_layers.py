"""Convolution layers: the im2col convolution vmapped population members use equals XLA's, and the
convolution whose gradient is written channels-last equals lax's (values, gradients, second order)
and compiles, inside a loop, to channels-last convolutions only."""

import re

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.encoders.cnn import CNN
from repr_jax.encoders.layers import conv


@pytest.mark.parametrize("shape, kernel", [((3, 40), 5), ((2, 8, 8, 2), 2)])
def test_im2col_convolution_equals_xla_convolution(shape, kernel):
    x = jax.random.normal(jax.random.PRNGKey(1), shape)
    xla = CNN(widths=(4, 6), kernel_size=kernel, norm="layer")
    patches = CNN(widths=(4, 6), kernel_size=kernel, norm="layer", im2col=True)
    variables = xla.init(jax.random.PRNGKey(0), x)
    chex.assert_trees_all_equal(variables, patches.init(jax.random.PRNGKey(0), x))
    np.testing.assert_allclose(patches.apply(variables, x)[0], xla.apply(variables, x)[0],
                               atol=1e-5)


@pytest.mark.parametrize("shape, window, padding", [
    ((3, 17, 2), (5,), "SAME"), ((2, 9, 7, 3), (3, 2), "SAME"), ((2, 9, 7, 3), (3, 3), "VALID"),
    ((3, 12, 2), (5,), ((1, 3),))])
def test_channels_last_gradient_convolution_equals_lax(shape, window, padding):
    """layers.conv (the CNN's) has lax's values and gradients (second order too), and inside a
    loop its gradient compiles to channels-last convolutions only — the layout XLA's CPU backend
    runs with its fast kernel (lax's own kernel gradient there is `f0b_i0o->0bf`, a naive loop)."""
    x = jax.random.normal(jax.random.PRNGKey(0), shape)
    ours = nn.Conv(5, window, padding=padding, conv_general_dilated=conv)
    lax_conv = nn.Conv(5, window, padding=padding)
    variables = lax_conv.init(jax.random.PRNGKey(1), x)

    def loss(module):
        return lambda v, x: (jnp.sin(module.apply(v, x)) ** 2).sum()
    np.testing.assert_allclose(ours.apply(variables, x), lax_conv.apply(variables, x), atol=1e-6)
    chex.assert_trees_all_close(jax.grad(loss(ours), argnums=(0, 1))(variables, x),
                                jax.grad(loss(lax_conv), argnums=(0, 1))(variables, x),
                                atol=1e-5, rtol=1e-5)
    chex.assert_trees_all_close(
        jax.grad(lambda v: (jax.grad(loss(ours), argnums=1)(v, x) ** 2).sum())(variables),
        jax.grad(lambda v: (jax.grad(loss(lax_conv), argnums=1)(v, x) ** 2).sum())(variables),
        atol=1e-4, rtol=1e-4)

    stacked = jax.tree.map(lambda a: jnp.stack([a, 2 * a]), variables)
    looped = jax.jit(lambda vs, x: jax.lax.map(lambda v: jax.grad(loss(ours))(v, x), vs))
    hlo = looped.lower(stacked, x).compile().as_text()
    labels = set(re.findall(r"dim_labels=([\w>-]+)", hlo))
    spatial = "".join(map(str, range(len(window))))
    assert labels == {f"b{spatial}f_{spatial}io->b{spatial}f"}, labels


def test_one_switch_turns_the_cpu_paths_off(monkeypatch):
    """repr_jax.backend.cpu_tuned() is the one switch: off, the convolution's gradient is lax's own
    and a CNN population vmaps its members."""
    from conftest import tiny_config

    from repr_jax.backend import cpu_tuned
    from repr_jax.train.population import members_per_chunk
    x, w = jnp.ones((2, 16, 3)), jnp.ones((5, 3, 4))

    def grad_jaxpr():
        loss = lambda w: conv(x, w, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")).sum()  # noqa: E731
        return str(jax.make_jaxpr(jax.grad(loss))(w))
    assert cpu_tuned() and "custom_vjp" in grad_jaxpr()
    assert members_per_chunk(tiny_config()) == 1
    monkeypatch.setenv("REPR_JAX_CPU_TUNING", "0")
    assert not cpu_tuned() and "custom_vjp" not in grad_jaxpr()
    assert members_per_chunk(tiny_config()) == 0


def test_gelu_exact_is_the_erf_gelu_with_its_derivative():
    """Values and gradients of jax.nn.gelu(approximate=False) (x Phi(x); derivative
    Phi(x) + x phi(x), written out here), over the range where either is not 0 or x."""
    import math

    from repr_jax.encoders.layers import gelu_exact
    x = jnp.linspace(-9.0, 9.0, 2001)
    np.testing.assert_allclose(gelu_exact(x), jax.nn.gelu(x, approximate=False), atol=2e-6)
    grad = jax.vmap(jax.grad(gelu_exact))(x)
    phi = np.exp(-0.5 * np.asarray(x, np.float64) ** 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, np.float64) / math.sqrt(2)))
    np.testing.assert_allclose(grad, cdf + np.asarray(x, np.float64) * phi, atol=1e-6)


def test_attend_is_softmax_attention_with_bias_or_mask():
    """encoders.attention.attend against softmax(q k^T / sqrt(d) + bias) v written out, and the
    boolean mask's convention: masked scores get no gradient."""
    from repr_jax.encoders.attention import attend
    ks = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(kk, (2, 5, 3, 4)) for kk in ks)
    keep = jnp.arange(5)[None, :] < jnp.array([5, 2])[:, None]  # [B, S]
    bias = jnp.where(keep, 0.0, jnp.finfo(jnp.float32).min)[:, None, None, :]

    def reference(q, k, v, bias):
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / 2.0 + bias
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)

    np.testing.assert_allclose(attend(q, k, v, bias), reference(q, k, v, bias), atol=1e-6)
    np.testing.assert_allclose(attend(q, k, v, mask=keep[:, None, None, :]),
                               reference(q, k, v, bias), atol=1e-6)
    g = jax.grad(lambda k: attend(q, k, v, mask=keep[:, None, None, :]).sum())(k)
    assert (g[1, 2:] == 0).all()  # masked keys: no gradient
