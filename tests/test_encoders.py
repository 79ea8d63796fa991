"""Encoder shapes, finiteness, named intermediates, per-example independence, clear errors."""

import chex
import numpy as np
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


# ----------------------------------------------------------------------------- text transformer
from repr_jax.encoders import pooling  # noqa: E402
from repr_jax.encoders.text_transformer import VARIANTS as TEXT_VARIANTS  # noqa: E402


def _ids(b=3, t=10, valid=(10, 6, 3), vocab=50, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(b, t)).astype(np.int32)
    for i, n in enumerate(valid):
        ids[i, n:] = 0
    return ids


@pytest.mark.parametrize("kind", sorted(pooling.POOLINGS))
def test_padding_never_changes_any_pooling(kind):
    """Appending padding (and changing what sits in padded slots) leaves every pooled embedding
    unchanged: the attention bias hides padded keys and every pooling ignores padded positions."""
    enc = encoders.build("text_transformer", "tiny", vocab_size=50, pooling=kind)
    ids = _ids()
    variables = enc.init(jax.random.PRNGKey(0), ids)
    emb, feats = enc.apply(variables, ids)
    longer = np.concatenate([ids, np.zeros((3, 6), np.int32)], axis=1)
    emb_long, _ = enc.apply(variables, longer)
    np.testing.assert_allclose(emb_long, emb, atol=1e-5)
    assert feats["tokens"].shape == (3, 10, 32) and feats["mask"].sum() == 19


def test_bidirectional_every_position_sees_the_whole_sequence():
    enc = encoders.build("text_transformer", "tiny", vocab_size=50)
    ids = _ids(b=1, valid=(10,))
    variables = enc.init(jax.random.PRNGKey(0), ids)
    # Changing the last token changes the first position's state (and vice versa): no causal mask.
    changed = ids.copy()
    changed[0, 9] = 7 if ids[0, 9] != 7 else 8
    a = enc.apply(variables, ids)[1]["tokens"]
    b = enc.apply(variables, changed)[1]["tokens"]
    assert not np.allclose(a[0, 0], b[0, 0])
    changed = ids.copy()
    changed[0, 0] = 7 if ids[0, 0] != 7 else 8
    b = enc.apply(variables, changed)[1]["tokens"]
    assert not np.allclose(a[0, 9], b[0, 9])


def test_text_transformer_sizes():
    """BERT-base: 108,891,648 parameters without the pooler (Hugging Face BertModel has 109,482,240
    with it); within 1% of the published 110M."""
    enc = encoders.build("text_transformer", "B", vocab_size=30522)
    shapes = jax.eval_shape(lambda: enc.init(jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32)))
    n = sum(x.size for x in jax.tree.leaves(shapes))
    assert n == 108_891_648 and 109_482_240 - n == 768 * 768 + 768  # HF adds a pooler Dense
    assert abs(n / 110e6 - 1) < 0.011
    assert set(TEXT_VARIANTS) >= {"tiny", "S", "B", "MiniLM-L6"}


def test_heads_must_divide_width():
    from repr_jax import config as C
    with pytest.raises(C.ConfigError, match="width 64 is not divisible by encoder.num_heads=3"):
        C.override(C.Config(), ["encoder.name=text_transformer", "encoder.width=64",
                                "encoder.num_heads=3"])
