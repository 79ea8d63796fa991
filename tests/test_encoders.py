"""Encoder shapes, finiteness, named intermediates, per-example independence, clear errors."""

import chex
import jax
import jax.numpy as jnp
import pytest

from repr_jax import encoders
from repr_jax.encoders import MLPHead


@pytest.mark.parametrize("name, variant, x_shape, emb_dim", [
    ("mlp", "tiny", (3, 40), 16),
    ("mlp", "S", (3, 8, 8, 1), 256),
    ("cnn", "tiny", (3, 40), 16),
    ("cnn", "S", (3, 40), 128),
    ("cnn", "tiny", (3, 8, 8, 1), 16),
])
def test_shapes_and_features(name, variant, x_shape, emb_dim):
    enc = encoders.build(name, variant)
    x = jax.random.normal(jax.random.PRNGKey(0), x_shape)
    variables = enc.init(jax.random.PRNGKey(1), x)
    for train in (False, True):
        (emb, feats), _ = enc.apply(variables, x, train=train, mutable=["batch_stats"])
        chex.assert_shape(emb, (3, emb_dim))
        chex.assert_tree_all_finite((emb, feats))
        assert len(feats["layers"]) == len(enc.widths)
        chex.assert_shape(feats["pooled"], (3, enc.widths[-1]))


def test_embed_dim_adds_linear_embedding():
    enc = encoders.build("cnn", "tiny", embed_dim=5)
    x = jnp.ones((2, 40))
    emb, feats = enc.apply(enc.init(jax.random.PRNGKey(0), x), x)
    assert emb.shape == (2, 5) and feats["pooled"].shape == (2, 16)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_eval_mode_is_per_example(name):
    """In eval mode no example's embedding depends on another: zero cross-example Jacobian."""
    enc = encoders.build(name, "tiny", norm="batch")
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 40))
    variables = enc.init(jax.random.PRNGKey(1), x)
    jac = jax.jacrev(lambda x: enc.apply(variables, x)[0][0].sum())(x)
    assert jnp.all(jac[1:] == 0) and jnp.any(jac[0] != 0)


def test_batchnorm_train_mode_updates_running_stats():
    enc = encoders.build("cnn", "tiny")
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 40)) * 3 + 1
    variables = enc.init(jax.random.PRNGKey(1), x)
    _, new = enc.apply(variables, x, train=True, mutable=["batch_stats"])
    before = jax.tree.leaves(variables["batch_stats"])
    after = jax.tree.leaves(new["batch_stats"])
    assert any(not jnp.allclose(a, b) for a, b in zip(before, after))


def test_head():
    head = MLPHead(out_dim=3, hidden=8, norm="batch")
    x = jnp.ones((2, 5))
    v = head.init(jax.random.PRNGKey(0), x)
    assert head.apply(v, x).shape == (2, 3) and "batch_stats" in v


def test_unknown_names_list_valid_ones():
    with pytest.raises(ValueError, match="unknown encoder 'cnnn' \\(did you mean 'cnn'\\?\\).*mlp"):
        encoders.build("cnnn")
    with pytest.raises(ValueError, match="unknown cnn variant 'XL'.*tiny, S, B"):
        encoders.build("cnn", "XL")
