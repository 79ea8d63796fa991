"""Gemma 3 as options of the decoder_lm family: the options on a tiny model (hand-checked), the
header's bad inputs, and parity with transformers' Gemma3ForCausalLM on the 270M GGUF (stored by
tests/data/make_gemma3_reference.py)."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.encoders.decoder_lm import DecoderLM, OffsetRMSNorm, next_token_logits
from repr_jax.llm_files import GEMMA3, read_header

from gemma3_weights import gemma3_model, gemma3_path

DATA = Path(__file__).resolve().parents[1] / "data"
TINY_GEMMA = dict(vocab_size=64, width=24, depth=3, num_heads=2, num_kv_heads=1, mlp_dim=32,
                  rope_base=1e6, eps=1e-6, head_dim=16, sliding_window=3, **GEMMA3)


def test_offset_rms_norm_by_hand():
    x = jnp.asarray([[3.0, -4.0]])  # rms 3.5355
    y = OffsetRMSNorm(1e-6).apply({"params": {"scale": jnp.asarray([0.5, -1.0])}}, x)
    rms = np.sqrt((9 + 16) / 2 + 1e-6)
    np.testing.assert_allclose(np.asarray(y), [[3 / rms * 1.5, -4 / rms * 0.0]], rtol=1e-6)


def _tiny(**kw):
    m = DecoderLM(**{**TINY_GEMMA, **kw})
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 9)), jnp.int32)
    return m, m.init(jax.random.PRNGKey(0), ids), ids


def test_gemma_options_build_the_parameter_tree():
    m, params, _ = _tiny()
    layer = params["params"]["layer_0"]
    assert set(layer) == {"input_layernorm", "post_attention_layernorm",
                          "pre_feedforward_layernorm", "post_feedforward_layernorm", "q_norm",
                          "k_norm", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                          "up_proj", "down_proj"}
    assert layer["q_proj"]["kernel"].shape == (24, 32)  # 2 heads of 16, not 24 / 2
    assert layer["o_proj"]["kernel"].shape == (32, 24)
    assert layer["q_norm"]["scale"].shape == (16,)
    assert float(jnp.abs(layer["input_layernorm"]["scale"]).max()) == 0.0  # (1 + w), w = 0
    assert [m.is_local(i) for i in range(12)] == [True] * 5 + [False] + [True] * 5 + [False]


@pytest.mark.parametrize("attention", ["causal", "bidirectional"])
def test_sliding_window_hides_far_tokens_in_local_blocks(attention):
    """With every block local (pattern 0) and window 3, position 8 reads positions 6..8 in the
    first block, so after two blocks nothing before position 4 reaches it: changing token 0..3
    leaves it unchanged, changing token 5 does not. A global block (pattern 1) sees all."""
    m, params, ids = _tiny(depth=2, sliding_pattern=0, attention=attention)
    f = jax.jit(lambda p, x: m.apply(p, x)[1]["tokens"])
    base = np.asarray(f(params, ids))
    far = np.asarray(f(params, ids.at[:, :4].set((ids[:, :4] + 1) % 64)))
    near = np.asarray(f(params, ids.at[:, 5].set((ids[:, 5] + 1) % 64)))
    np.testing.assert_allclose(far[:, 8], base[:, 8], atol=1e-6)
    assert np.abs(near[:, 8] - base[:, 8]).max() > 1e-4
    g, gparams, _ = _tiny(depth=2, sliding_pattern=1, attention=attention)
    fg = jax.jit(lambda p, x: g.apply(p, x)[1]["tokens"])
    changed = np.asarray(fg(gparams, ids.at[:, :4].set((ids[:, :4] + 1) % 64)))
    assert np.abs(changed[:, 8] - np.asarray(fg(gparams, ids))[:, 8]).max() > 1e-4


def test_embedding_scale_and_geglu_by_hand():
    """With every other parameter 0 a block adds nothing, so block 0's output is the input:
    the embedding times sqrt(width). The GeGLU's activation is the tanh GELU."""
    m, params, ids = _tiny(depth=1)
    p = jax.tree.map(jnp.zeros_like, params)
    emb = jax.random.normal(jax.random.PRNGKey(1), (64, 24))
    p["params"]["embed_tokens"]["embedding"] = emb
    out = m.apply(p, ids)[1]["layers"][0]  # every projection 0: the block adds nothing
    np.testing.assert_allclose(np.asarray(out), np.asarray(emb[ids] * np.sqrt(24.0)), rtol=1e-6)
    x = jnp.asarray([-1.0, 0.5, 2.0])
    gelu_tanh = 0.5 * x * (1 + jnp.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    from repr_jax.encoders.decoder_lm import ACTIVATIONS
    np.testing.assert_allclose(ACTIVATIONS["gelu_tanh"](x), gelu_tanh, rtol=1e-6)


def _write_header(path, **kw):
    import gguf
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_block_count(kw.get("depth", 2))
    w.add_context_length(kw.get("context", 64))
    w.add_embedding_length(24)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_key_length(16)
    w.add_value_length(16)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(kw.get("window", 8))
    if "scaling" in kw:
        w.add_rope_scaling_type(kw["scaling"])
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(64)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gemma3_header_reads_its_conventions(tmp_path):
    _write_header(tmp_path / "g.gguf")
    h = read_header(tmp_path / "g.gguf")
    assert (h.head_dim, h.sliding_window, h.sliding_pattern, h.rope_local_base, h.norm_offset,
            h.mlp_act, h.context_length) == (16, 8, 6, 10000.0, 1.0, "gelu_tanh", 64)
    assert h.query_scalar == 0.0  # the head size
    _write_header(tmp_path / "27b.gguf", depth=62)  # llama.cpp's 27B: width / heads
    assert read_header(tmp_path / "27b.gguf").query_scalar == 12.0


@pytest.mark.parametrize("case", ["window", "scaling"])
def test_gemma3_header_bad_inputs(tmp_path, case):
    import gguf
    if case == "window":
        _write_header(tmp_path / "g.gguf", window=128, context=64)
        match = "sliding window 128 is larger than the context 64"
    else:
        _write_header(tmp_path / "g.gguf", scaling=gguf.RopeScalingType.YARN)
        match = "declares RoPE scaling 'yarn'"
    with pytest.raises(ValueError, match=match) as info:
        read_header(tmp_path / "g.gguf")
    assert "\n" not in str(info.value)


def test_unknown_activation_is_refused():
    with pytest.raises(ValueError, match="mlp_act 'relu'; choose from: silu, gelu_tanh"):
        _tiny(mlp_act="relu")


# ------------------------------------------------------------------------------ 270M parity
@pytest.fixture(scope="module")
def gemma3():
    """(module, params, reference) of the 270M GGUF, read once."""
    return gemma3_model()


def _rel(a, b):
    return float((np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)).max())


@pytest.mark.slow
def test_gemma3_header_of_the_270m_file():
    h = read_header(gemma3_path())
    assert (h.architecture, h.vocab_size, h.width, h.depth, h.num_heads, h.num_kv_heads,
            h.head_dim, h.mlp_dim, h.sliding_window, h.rope_base, h.eps) == (
        "gemma3", 262144, 640, 18, 4, 1, 256, 2048, 512, 1e6, 1e-6)


@pytest.mark.slow
def test_gemma3_equals_transformers_in_six_languages(gemma3):
    """Scaled embeddings, block 5's output, the final states, 512 logits and the log-normaliser
    at every token of six texts (English, French, Chinese, Arabic, emoji, Russian), batched
    with right and with left padding, equal Gemma3ForCausalLM's on the same file."""
    module, params, ref = gemma3
    off = ref["offsets"]
    rows = [ref["ids"][off[i]:off[i + 1]] for i in range(len(off) - 1)]
    width = max(len(r) for r in rows)
    apply = jax.jit(lambda p, x: module.apply({"params": p}, x)[1])
    sub = jnp.asarray(ref["vocab_sub"])
    for left in (False, True):
        ids = np.full((len(rows), width), -1, np.int32)
        for i, r in enumerate(rows):
            if left:
                ids[i, width - len(r):] = r
            else:
                ids[i, :len(r)] = r
        feats = apply(params, jnp.asarray(ids))
        valid = ids != -1
        tokens = np.asarray(feats["tokens"])[valid]
        assert _rel(tokens, ref["states"]) < 1e-4
        assert _rel(np.asarray(feats["layers"][5])[valid], ref["layer5"]) < 1e-4
        logits = next_token_logits(params, feats["tokens"])
        np.testing.assert_allclose(np.asarray(logits[..., sub])[valid], ref["logits_sub"],
                                   atol=2e-3, rtol=1e-4)
        np.testing.assert_allclose(np.asarray(jax.nn.logsumexp(logits, -1))[valid],
                                   ref["logsumexp"], atol=1e-3, rtol=1e-4)
        np.testing.assert_array_equal(np.asarray(logits.argmax(-1))[valid], ref["argmax"])


@pytest.mark.slow
def test_gemma3_equals_transformers_at_2048_tokens(gemma3):
    """A 2,048-token text: the sliding window (512) is active in 15 of 18 blocks."""
    module, params, ref = gemma3
    feats = jax.jit(lambda p, x: module.apply({"params": p}, x)[1])(
        params, jnp.asarray(ref["long_ids"][None]))
    at = ref["long_positions"]
    assert _rel(np.asarray(feats["tokens"])[0, at], ref["long_states"]) < 1e-4
    assert _rel(np.asarray(feats["layers"][5])[0, at], ref["long_layer5"]) < 1e-4
    logits = next_token_logits(params, feats["tokens"][:, at])[0]
    np.testing.assert_allclose(np.asarray(jax.nn.logsumexp(logits, -1)), ref["long_logsumexp"],
                               atol=1e-3, rtol=1e-4)
    np.testing.assert_array_equal(np.asarray(logits.argmax(-1)), ref["long_argmax"])


@pytest.mark.slow
def test_gemma3_encode_counts_the_texts_it_cuts():
    """Through ``load_decoder_lm``/``encode`` as a user calls them: the ids equal transformers'
    (BOS first), the six texts' mean embeddings are finite, and a text past ``max_len`` is cut
    with a warning that counts it."""
    gemma3_path()
    from repr_jax.encoders.decoder_lm_weights import encode, load_decoder_lm
    loaded = load_decoder_lm("gemma3")
    ref = np.load(DATA / "gemma3_reference.npz")
    texts, off = [str(t) for t in ref["texts"]], ref["offsets"]
    assert loaded.tokenizer.rows(texts) == [list(ref["ids"][off[i]:off[i + 1]])
                                            for i in range(len(texts))]
    assert np.isfinite(encode(loaded, texts, pooling="mean")).all()
    with pytest.warns(UserWarning, match="encode: 1 of 6 texts cut at max_len=16 tokens"):
        encode(loaded, texts, max_len=16)


# ------------------------------------------------------------------------------ RoPE scaling
def test_rope_scalings_by_hand():
    """linear: positions divided by the factor; ntk: the highest frequency kept, the lowest
    divided by the factor; yarn (d 16, base 1e4, trained on 64, factor 4): dimensions 0 kept,
    3.. interpolated, 1 and 2 on the ramp (2/3 and 1/3 kept), cos and sin times 1 + 0.1 ln 4;
    any scaling at factor 1 is none."""
    from repr_jax.encoders.decoder_lm import rope, rope_frequencies
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 5, 2, 16))
    pos = jnp.arange(5.0)[None] * 3
    np.testing.assert_allclose(rope(x, pos, 1e4, ("linear", 2.0, 0)), rope(x, pos / 2, 1e4),
                               rtol=1e-5, atol=1e-6)
    plain, _ = rope_frequencies(16, 1e4)
    ntk, _ = rope_frequencies(16, 1e4, "ntk", 4.0)
    np.testing.assert_allclose([ntk[0], ntk[-1]], [plain[0], plain[-1] / 4], rtol=1e-5)
    yarn, scale = rope_frequencies(16, 1e4, "yarn", 4.0, 64)
    kept = np.asarray([1, 2 / 3, 1 / 3, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(yarn, plain * kept + plain / 4 * (1 - kept), rtol=1e-5)
    assert scale == pytest.approx(1 + 0.1 * np.log(4))
    for kind in ("linear", "ntk", "yarn"):
        np.testing.assert_array_equal(rope(x, pos, 1e4, (kind, 1.0, 64)), rope(x, pos, 1e4))


def test_rope_scalings_equal_transformers():
    """Linear and YaRN inverse frequencies and attention factors equal transformers'
    ``ROPE_INIT_FUNCTIONS`` (``tests/data/make_rope_reference.py``: Gemma 3 4B's linear factor 8,
    YaRN at head sizes 16 to 256 and factors 4 to 16) to float32 rounding."""
    import json
    from pathlib import Path

    from repr_jax.encoders.decoder_lm import rope_frequencies
    ref = json.loads((Path(__file__).parents[1] / "data" / "rope_reference.json").read_text())
    assert {c["kind"] for c in ref["cases"]} == {"linear", "yarn"}
    for c in ref["cases"]:
        inv, factor = rope_frequencies(c["d"], c["base"], c["kind"], c["factor"],
                                       c["original_context"])
        np.testing.assert_allclose(inv, c["inv_freq"], rtol=1e-6, err_msg=str(c["kind"]))
        assert factor == pytest.approx(c["attention_factor"], rel=1e-12)


@pytest.mark.parametrize("fields,match", [
    (dict(rope_factor=0.0), "RoPE scaling factor 0.0 must be > 0"),
    (dict(rope_scaling="dynamic"), "rope_scaling 'dynamic'; choose from: none, linear, ntk, yarn"),
    (dict(rope_scaling="yarn", rope_factor=4.0), "rope_scaling='yarn' needs rope_original_context"),
])
def test_rope_scaling_bad_inputs(fields, match):
    with pytest.raises(ValueError, match=match) as info:
        _tiny(**fields)
    assert "\n" not in str(info.value)


def test_rope_scaling_reaches_only_global_blocks():
    """Gemma 3's convention: the global blocks are scaled, the local ones keep their base."""
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 64, (1, 9)), jnp.int32)
    outs = {}
    for scaling in ("none", "linear"):
        m = DecoderLM(**{**TINY_GEMMA, "depth": 2, "sliding_pattern": 2,
                         "rope_scaling": scaling, "rope_factor": 4.0})
        params = m.init(jax.random.PRNGKey(0), ids)
        outs[scaling] = m.apply(params, ids)[1]["layers"]
    np.testing.assert_array_equal(outs["none"][0], outs["linear"][0])  # block 0: local
    assert np.abs(np.asarray(outs["none"][1] - outs["linear"][1])).max() > 1e-4  # block 1: global


HF_TINY = DATA / "gemma3_hf_tiny"  # written by transformers (tests/data/make_gemma3_hf_reference.py)


def _hf_copy(tmp_path, name, **changes):
    import json
    import shutil
    folder = tmp_path / name
    shutil.copytree(HF_TINY, folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _hf_states(folder, attention="causal", **override):
    from repr_jax.encoders.decoder_lm_weights import read_decoder_weights
    header, params = read_decoder_weights(folder)
    ids = jnp.asarray(np.load(DATA / "gemma3_hf_tiny_reference.npz")["ids"])
    module = DecoderLM(**{**header.module_fields(), **override}, attention=attention,
                       pooling="mean")
    _, feats = module.apply({"params": params}, ids)
    return header, params, feats


def _rel(a, b):
    return float(np.abs(np.asarray(a) - b).max() / np.abs(b).max())


def test_gemma3_text_folder_equals_transformers(tmp_path):
    """A gemma3_text folder saved by transformers 5.25 (global and local blocks, a 4-token
    window over 12-token rows, query_pre_attn_scalar 24 against a head size of 16) reads to
    transformers' states and logits; its 4.x config keys give the same model; EmbeddingGemma's
    use_bidirectional_attention narrows the window as transformers does."""
    ref = np.load(DATA / "gemma3_hf_tiny_reference.npz")
    header, params, feats = _hf_states(HF_TINY)
    assert (header.architecture, header.query_scalar, header.rope_base,
            header.rope_local_base, header.sliding_window) == ("gemma3_text", 24.0, 1e6, 1e4, 4)
    assert _rel(feats["tokens"], ref["states"]) < 1e-5
    assert _rel(feats["layers"][2], ref["layer2"]) < 1e-5
    logits = np.asarray(feats["tokens"]) @ np.asarray(params["embed_tokens"]["embedding"]).T
    assert _rel(logits, ref["logits"]) < 1e-5
    _, _, plain = _hf_states(HF_TINY, query_scalar=0.0)  # the scale is what makes it equal
    assert _rel(plain["tokens"], ref["states"]) > 1e-2
    old = _hf_copy(tmp_path, "v4", rope_parameters=None, layer_types=None,
                   _sliding_window_pattern=None, rope_theta=1e6, rope_local_base_freq=1e4,
                   sliding_window_pattern=6)
    _, _, again = _hf_states(old)
    np.testing.assert_array_equal(np.asarray(again["tokens"]), np.asarray(feats["tokens"]))
    both = _hf_copy(tmp_path, "bidirectional", use_bidirectional_attention=True)
    header, _, feats = _hf_states(both, "bidirectional")
    assert header.bidirectional and header.sliding_window == 3
    assert _rel(feats["tokens"], ref["bidirectional_states"]) < 1e-5


@pytest.mark.parametrize("changes, match", [
    (dict(final_logit_softcapping=30.0), "final_logit_softcapping=30.0 is not read"),
    (dict(hidden_activation="relu"), "hidden_activation 'relu'"),
    (dict(layer_types=["full_attention"] * 6), "are not every 6th block global"),
    (dict(rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                              "rope_theta": 1e6}}), "RoPE scaling 'linear'"),
    (dict(sliding_window=128), "sliding window 128 is larger than the context 64")])
def test_gemma3_text_folder_bad_inputs(tmp_path, changes, match):
    from repr_jax.llm_files import read_header
    with pytest.raises(ValueError, match=match) as e:
        read_header(_hf_copy(tmp_path, "bad", **changes))
    assert "\n" not in str(e.value) and "config.json" in str(e.value)
