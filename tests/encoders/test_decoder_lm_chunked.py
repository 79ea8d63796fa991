"""Chunked attention (``DecoderLM.attention_chunk``) equals the dense path: a tiny Gemma-style
model (local and global blocks) and a tiny Llama-style one, causal and bidirectional, left and
right padding, chunks that do and do not divide the length, windows smaller and larger than the
chunk, outputs and gradients; and the 270M Gemma 3 at 2,048 tokens against transformers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.encoders import precision
from repr_jax.encoders.decoder_lm import DecoderLM, chunked_attention
from repr_jax.llm_files import GEMMA3

from gemma3_weights import gemma3_model

TINY_GEMMA = {**GEMMA3, **dict(vocab_size=64, width=24, depth=3, num_heads=2, num_kv_heads=1,
                                mlp_dim=32, rope_base=1e6, eps=1e-6, head_dim=16,
                                sliding_window=5, sliding_pattern=3)}
TINY_LLAMA = dict(vocab_size=64, width=32, depth=2, num_heads=4, num_kv_heads=2, mlp_dim=64)


def _rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / np.abs(b).max())


def _ids(t=23, pad="right"):
    """Two rows of ``t`` positions, the second with 7 padding positions on ``pad``'s side."""
    ids = np.random.default_rng(0).integers(0, 64, (2, t)).astype(np.int32)
    if pad == "right":
        ids[1, t - 7:] = -1
    else:
        ids[1, :7] = -1
    return jnp.asarray(ids)


def _pair(fields, chunk, ids, **kw):
    """(dense tokens, chunked tokens, valid) of one parameter draw."""
    dense = DecoderLM(**fields, **kw)
    params = dense.init(jax.random.PRNGKey(0), ids)
    chunked = DecoderLM(**fields, **kw, attention_chunk=chunk)
    a = dense.apply(params, ids)[1]["tokens"]
    b = chunked.apply(params, ids)[1]["tokens"]
    return np.asarray(a), np.asarray(b), np.asarray(ids != -1), params, dense, chunked


@pytest.mark.parametrize("chunk,window,pad,attention", [
    (4, 5, "left", "causal"), (7, 5, "right", "bidirectional"), (8, 3, "left", "bidirectional"),
    (8, 3, "right", "causal"), (23, 5, "right", "causal"), (64, 5, "left", "bidirectional"),
    (5, 40, "left", "causal")])
def test_chunked_equals_dense_gemma(attention, pad, chunk, window):
    """Chunks of 4 and 7 don't divide 23, 8 does not either but exceeds the window 3; 23 and 64
    are one block; a window of 40 spans every key. Each padding side and attention meets
    several of them."""
    ids = _ids(pad=pad)
    a, b, valid, *_ = _pair({**TINY_GEMMA, "sliding_window": window}, chunk, ids,
                            attention=attention)
    assert np.isfinite(b).all()
    assert _rel(b[valid], a[valid]) < 1e-5


@pytest.mark.parametrize("chunk,pad,attention", [
    (4, "left", "causal"), (6, "right", "bidirectional"), (24, "left", "bidirectional"),
    (5, "right", "causal")])
def test_chunked_equals_dense_llama(attention, pad, chunk):
    ids = _ids(t=24, pad=pad)
    a, b, valid, *_ = _pair(TINY_LLAMA, chunk, ids, attention=attention)
    assert np.isfinite(b).all()
    assert _rel(b[valid], a[valid]) < 1e-5


@pytest.mark.parametrize("fields", [TINY_GEMMA, TINY_LLAMA], ids=["gemma", "llama"])
@pytest.mark.parametrize("attention", ["causal", "bidirectional"])
def test_chunked_gradients_equal_dense(fields, attention):
    ids = _ids(pad="left")
    _, _, valid, params, dense, chunked = _pair(fields, 4, ids, attention=attention)
    w = jnp.asarray(valid, jnp.float32)[..., None]

    def loss(m):
        return lambda p: jnp.sum(jnp.sin(m.apply(p, ids)[1]["tokens"]) * w)
    ga = jax.jit(jax.grad(loss(dense)))(params)
    gb = jax.jit(jax.grad(loss(chunked)))(params)
    for x, y in zip(jax.tree.leaves(gb), jax.tree.leaves(ga)):
        assert np.isfinite(np.asarray(x)).all()
        assert _rel(x, y) < 1e-5


def test_chunked_under_remat_and_bfloat16_policy():
    """Remat changes nothing; under ``precision.mixed()`` chunked equals dense as closely as the
    bfloat16 products allow (the same products, other sums)."""
    ids = _ids(pad="right")
    a, b, valid, params, dense, _ = _pair(TINY_GEMMA, 4, ids)
    r = DecoderLM(**TINY_GEMMA, attention_chunk=4, remat=True).apply(params, ids)[1]["tokens"]
    assert _rel(np.asarray(r)[valid], b[valid]) < 1e-6
    with precision.mixed():
        a16 = np.asarray(dense.apply(params, ids)[1]["tokens"])
        b16 = np.asarray(DecoderLM(**TINY_GEMMA, attention_chunk=4).apply(params, ids)[1][
            "tokens"])
    assert np.isfinite(b16).all()
    assert _rel(b16[valid], a16[valid]) < 1e-2


def test_fully_masked_queries_give_zeros_not_nan():
    q = jax.random.normal(jax.random.PRNGKey(0), (1, 6, 2, 4))
    k = v = jax.random.normal(jax.random.PRNGKey(1), (1, 6, 1, 4))
    valid = jnp.asarray([[False, False, True, True, True, True]])
    out = chunked_attention(q, k, v, valid, chunk=4, window=2, causal=True)
    assert np.isfinite(np.asarray(out)).all()
    np.testing.assert_array_equal(np.asarray(out[0, :2]), 0.0)


def test_long_texts_are_chunked_automatically():
    """``attention_chunk`` 0 goes chunked beyond 2,048 tokens: the same states as chunks of 512."""
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 64, (1, 2100)), jnp.int32)
    auto = DecoderLM(**{**TINY_GEMMA, "depth": 1})
    params = auto.init(jax.random.PRNGKey(0), ids[:, :8])
    a = jax.jit(auto.apply)(params, ids)[1]["tokens"]
    b = jax.jit(DecoderLM(**{**TINY_GEMMA, "depth": 1}, attention_chunk=512).apply)(
        params, ids)[1]["tokens"]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_negative_chunk_is_refused():
    with pytest.raises(ValueError, match="attention_chunk -1 must be >= 0") as info:
        DecoderLM(**TINY_GEMMA, attention_chunk=-1).init(jax.random.PRNGKey(0), _ids())
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------ 270M parity
@pytest.fixture(scope="module")
def gemma3():
    """(module, params, reference) of the 270M GGUF, read once."""
    return gemma3_model()


@pytest.mark.slow
def test_gemma3_chunked_equals_transformers_at_2048_tokens(gemma3):
    dense, params, ref = gemma3
    module = dense.clone(attention_chunk=256)
    feats = jax.jit(lambda p, x: module.apply({"params": p}, x)[1])(
        params, jnp.asarray(ref["long_ids"][None]))
    got = np.asarray(feats["tokens"])[0, ref["long_positions"]]
    want = ref["long_states"]
    assert float((np.linalg.norm(got - want, axis=-1) / np.linalg.norm(want, axis=-1)).max()) < 1e-4
