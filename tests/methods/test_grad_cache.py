"""The gradient cache equals full-batch value_and_grad of an in-batch-negative loss (CLIP's
symmetric InfoNCE with a learned temperature, two towers) to 1e-5."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.objectives import clip_loss, l2_normalize
from repr_jax.methods.grad_cache import grad_cache_value_and_grad


class Towers(nn.Module):
    def setup(self):
        self.a1, self.a_ln, self.a2 = nn.Dense(16), nn.LayerNorm(), nn.Dense(8)
        self.b1, self.b2 = nn.Dense(16), nn.Dense(8)
        self.log_scale = self.param("log_scale", nn.initializers.constant(2.0), ())

    def __call__(self, x, y):
        return self.a(x), self.b(y), self.log_scale

    def a(self, x):
        return self.a2(self.a_ln(nn.tanh(self.a1(x))))

    def b(self, y):
        return self.b2(nn.tanh(self.b1(y)))


def test_grad_cache_equals_the_full_batch():
    x = jax.random.normal(jax.random.PRNGKey(0), (64, 12))
    y = jax.random.normal(jax.random.PRNGKey(1), (64, 5))
    model = Towers()
    params = model.init(jax.random.PRNGKey(2), x, y)["params"]

    def embed_a(p, xc):
        return model.apply({"params": p}, xc, method=Towers.a)

    def embed_b(p, yc):
        return model.apply({"params": p}, yc, method=Towers.b)

    def loss_fn(p, za, zb):
        return clip_loss(l2_normalize(za), l2_normalize(zb), jnp.exp(p["log_scale"]))

    def full(p):
        return loss_fn(p, embed_a(p, x), embed_b(p, y))

    want_loss, want_grads = jax.value_and_grad(full)(params)
    for chunk in (8, 64):
        loss, grads = jax.jit(lambda p, chunk=chunk: grad_cache_value_and_grad(
            (embed_a, embed_b), loss_fn, p, (x, y), chunk_size=chunk))(params)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
        chex.assert_trees_all_close(grads, want_grads, atol=1e-5, rtol=1e-5)
    assert float(jnp.abs(want_grads["log_scale"])) > 0  # the loss's own parameter is trained too
    with pytest.raises(ValueError, match="not divisible"):
        grad_cache_value_and_grad((embed_a, embed_b), loss_fn, params, (x, y), chunk_size=10)
