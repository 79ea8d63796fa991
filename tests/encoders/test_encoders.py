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


@pytest.mark.parametrize("family, kind", [("text_transformer", k) for k in pooling.ALL_POOLINGS]
                         + [("lstm", k) for k in ("max", "mean", "last_token", "attention",
                                                  "multi_layer")])
def test_padding_never_changes_any_pooling(family, kind):
    """Appending padding leaves every pooled embedding unchanged: the attention bias hides padded
    keys, the LSTM stops at each row's length, and every pooling ignores padded positions."""
    extra = {"landmark_id": 3, "landmark_chunk": 4} if family == "text_transformer" else {}
    enc = encoders.build(family, "tiny", vocab_size=50, pooling=kind, **extra)
    ids = _ids()
    variables = enc.init(jax.random.PRNGKey(0), ids)
    emb, feats = enc.apply(variables, ids)
    longer = np.concatenate([ids, np.zeros((3, 6), np.int32)], axis=1)
    emb_long, _ = enc.apply(variables, longer)
    np.testing.assert_allclose(emb_long, emb, atol=1e-5)
    chex.assert_tree_all_finite(emb)
    assert feats["mask"].sum() == 19 + (6 if kind == "landmark" else 0)  # 3 + 2 + 1 landmarks


@pytest.mark.parametrize("family", ["text_transformer", "lstm"])
def test_bidirectional_every_position_sees_the_whole_sequence(family):
    enc = encoders.build(family, "tiny", vocab_size=50)
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
    section = C.override(C.Config(), ["encoder.name=text_transformer", "encoder.width=64",
                                      "encoder.num_heads=3"]).encoder
    with pytest.raises(ValueError, match="width 64 is not divisible by encoder.num_heads=3"):
        encoders.check_section(section)


# ----------------------------------------------------------------------------- every family
IMAGE = (2, 8, 8, 1)


@pytest.mark.parametrize("family, variant", [(f, v) for f, family in encoders.FAMILIES.items()
                                             for v in family.variants])
def test_every_family_and_variant_shapes(family, variant):
    """Shapes for every variant (abstractly: no big compute); the tiny ones run for finiteness."""
    token = family in encoders.TOKEN_FAMILIES
    kwargs = {"vocab_size": 100} if token else {}
    if family in ("vit", "mixer") and variant != "tiny":
        x = jnp.zeros((2, 32, 32, 3))
    else:
        x = jnp.zeros((2, 12), jnp.int32) if token else jnp.zeros(IMAGE)
    enc = encoders.build(family, variant, **kwargs)
    variables = jax.eval_shape(lambda: enc.init(jax.random.PRNGKey(0), x))
    (emb, feats) = jax.eval_shape(lambda v: enc.apply(v, x), variables)
    assert emb.shape[0] == 2 and emb.ndim == 2 and feats["pooled"].shape == emb.shape
    assert len(feats["layers"]) >= 1
    if variant == "tiny":
        x = jnp.asarray(np.random.default_rng(0).integers(1, 100, (2, 12)), jnp.int32) if token \
            else jax.random.normal(jax.random.PRNGKey(1), x.shape)
        v = enc.init(jax.random.PRNGKey(0), x)
        (emb, feats), _ = enc.apply(v, x, train=True, mutable=["batch_stats"])
        chex.assert_tree_all_finite((emb, feats))


def _n_params(enc, x):
    v = jax.eval_shape(lambda: enc.init(jax.random.PRNGKey(0), x))
    return sum(a.size for a in jax.tree.leaves(v["params"]))


@pytest.mark.parametrize("family, variant, published, head", [
    ("resnet", "50", 25_557_032, 2048),      # torchvision resnet50 (with its 1000-way fc)
    ("resnet", "18", 11_689_512, 512),       # torchvision resnet18
    ("vit", "B", 86_567_656, 768),           # timm vit_base_patch16_224
    ("mixer", "B", 59_880_472, 768),         # timm mixer_b16_224
])
def test_published_parameter_counts(family, variant, published, head):
    """Encoder + a 1000-class linear head at 224×224 within 1% of the published count. ResNet and
    Mixer match exactly; ViT-B/16 is 768 short: big_vision adds positions to the patches only, timm
    also gives the CLS token a position."""
    n = _n_params(encoders.build(family, variant), jnp.zeros((1, 224, 224, 3)))
    n += head * 1000 + 1000
    assert abs(n / published - 1) < 0.01
    if family != "vit":
        assert n == published
    else:
        assert published - n == 768


@pytest.mark.slow
def test_encoder_swap_is_one_config_field(tmp_path):
    """The same training config runs with each family by changing encoder.name (images: digits;
    token encoders: latent_topics)."""
    from repr_jax import config as C
    from repr_jax.train import train_and_evaluate
    base = C.Config(data=C.DataConfig(name="digits"),
                    method=C.MethodConfig(proj_hidden=16, proj_dim=8),
                    encoder=C.EncoderConfig(variant="tiny"),
                    train=C.TrainConfig(batch_size=16, steps=2, ckpt_every=0, num_devices=1),
                    eval=C.EvalConfig(evaluators=("knn",), reference_rows=False))
    text = C.override(base, ["data.name=latent_topics", "data.num_examples=300"])
    for family in encoders.FAMILIES:
        cfg = C.override(text if family in encoders.TOKEN_FAMILIES else base,
                         [f"encoder.name={family}"])
        out = train_and_evaluate(cfg, tmp_path / family, progress=False, verbose=False)
        values = {f"{r['evaluator']}/{r['metric']}": r["value"] for r in out["eval_rows"]}
        assert 0.0 <= values["knn/accuracy"] <= 1.0 and np.isfinite(values["upstream/loss"])
    with pytest.raises(ValueError, match="reads images"):
        train_and_evaluate(C.override(base, ["encoder.name=vit", "data.name=mnist1d",
                                             "data.num_examples=500"]),
                           tmp_path / "bad", progress=False, verbose=False)


def test_every_family_is_built_from_its_config_section():
    """encoders.from_section turns any family's section into its module (the registry, not
    config.py, knows the families)."""
    from repr_jax import config as C
    shapes = {"text_transformer": (12,), "lstm": (12,), "resnet": (8, 8, 1), "vit": (8, 8, 1),
              "mixer": (8, 8, 1)}
    vocab = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b")
    for family in encoders.FAMILIES:
        section = C.EncoderConfig(name=family, **({"widths": (8,)} if family in ("mlp", "cnn")
                                                  else {}))
        assert isinstance(section, encoders.FAMILIES[family].section)
        text = family in encoders.TOKEN_FAMILIES
        module = encoders.from_section(section, input_shape=shapes.get(family, (40,)),
                                       vocab=vocab if text else None)
        assert type(module) is encoders.FAMILIES[family].module
    with pytest.raises(ValueError, match="reads token ids, but dataset 'x' has no vocabulary"):
        encoders.from_section(C.EncoderConfig(name="lstm"), input_shape=(40,), vocab=None,
                              dataset_name="x")


@pytest.mark.parametrize("family", encoders.REMAT_FAMILIES)
def test_remat_recomputes_blocks_with_the_same_parameters_and_gradients(family):
    """remat=True changes memory, not maths: same variable tree, same loss and gradients, and the
    differentiated program holds one rematerialised region per block."""
    text = family in ("text_transformer", "decoder_lm")
    x = (jax.random.randint(jax.random.PRNGKey(0), (2, 12), 1, 50) if text
         else jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8, 1)))
    extra = {"vocab_size": 50, "max_len": 16} if family == "text_transformer" else {}
    if family == "decoder_lm":
        extra = {"vocab_size": 50}
    if family in ("vit", "mixer"):
        extra["patch_size"] = 4
    if family == "resnet":
        extra.update(stage_sizes=(1, 1), num_filters=4, small_images=True)
    plain = encoders.build(family, None if family == "resnet" else "tiny", **extra)
    remat = plain.clone(remat=True)
    variables = plain.init(jax.random.PRNGKey(1), x)
    chex.assert_trees_all_equal_shapes(variables, remat.init(jax.random.PRNGKey(1), x))

    def loss(model):
        def f(params):
            (emb, _), _ = model.apply({**variables, "params": params}, x, train=True,
                                      mutable=["batch_stats"])
            return jnp.sum(emb ** 2)
        return f

    expected = jax.jit(jax.value_and_grad(loss(plain)))(variables["params"])
    chex.assert_trees_all_close(jax.jit(jax.value_and_grad(loss(remat)))(variables["params"]),
                                expected, rtol=1e-5, atol=1e-5)
    jaxpr = str(jax.make_jaxpr(jax.grad(loss(remat)))(variables["params"]))
    assert jaxpr.count("remat") + jaxpr.count("checkpoint") >= 2


def test_vit_self_attention_is_flax_multi_head_attention():
    """The ViT block's attention (computed in its own layout) has flax's
    ``MultiHeadDotProductAttention`` variables, initialisation, result and gradients, with and
    without a key mask."""
    import flax.linen as nn

    from repr_jax.encoders.vit import SelfAttention
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 9, 48))
    mask = jnp.arange(9)[None] < jnp.array([9, 5, 1, 7])[:, None]
    ours, flax_mha = SelfAttention(3), nn.MultiHeadDotProductAttention(3)
    variables = flax_mha.init(jax.random.PRNGKey(1), x, x)
    chex.assert_trees_all_equal(ours.init(jax.random.PRNGKey(1), x), variables)
    for m in (None, mask):
        flax_mask = None if m is None else nn.make_attention_mask(m, m)

        def loss(module_apply):
            return jax.value_and_grad(lambda v, x: jnp.sum(module_apply(v, x) ** 3), (0, 1))

        got = loss(lambda v, x: ours.apply(v, x, m))(variables, x)
        want = loss(lambda v, x: flax_mha.apply(v, x, x, mask=flax_mask))(variables, x)
        chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-5)
