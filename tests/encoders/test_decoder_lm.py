"""decoder_lm: the Llama-family encoder, its poolings and masks, its next-token logits and
cross-entropy, GGUF / Hugging Face import (untied output heads included), and SmolLM2's parity
with transformers, hidden states and next-token predictions (tests/data/make_smollm2_reference.py).
"""

import json
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from repr_jax.encoders.decoder_lm import (DecoderLM, last_valid, next_token_cross_entropy,
                                          next_token_cross_entropy_chunked, next_token_logits,
                                          next_token_mask, pool, split_ids)
from repr_jax.encoders.decoder_lm_weights import (load_decoder_lm, output_head,
                                                   read_decoder_weights, read_header)

LLAMA_DEFAULTS = dict(head_dim=0, sliding_window=0, sliding_pattern=0, rope_local_base=0.0,
                      norm_offset=0.0, post_norms=False, qk_norm=False, embed_scale=False,
                      mlp_act="silu", query_scalar=0.0)  # Gemma's options, off
DATA = Path(__file__).resolve().parent.parent / "data"
sys.path.insert(0, str(DATA.parent))
from conftest import needs_smollm2  # noqa: E402

from tiny_llm import TINY, byte_vocab, hf_tensors, write_gguf, write_odd_gguf  # noqa: E402


def _tiny(**kw):
    module = DecoderLM(**{**TINY, **kw})
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    return module, params


def _states(module, params, ids):
    return np.asarray(module.apply({"params": params}, jnp.asarray(ids, jnp.int32))[1]["tokens"])


# --------------------------------------------------------------------------- masks and poolings
def test_bidirectional_lets_a_later_token_change_an_earlier_one_and_causal_does_not():
    a, b = [[5, 6, 7, 8]], [[5, 6, 7, 9]]  # batch size 1, the last token differs
    for attention, changes in (("causal", False), ("bidirectional", True)):
        module, params = _tiny(attention=attention)
        sa, sb = _states(module, params, a), _states(module, params, b)
        assert np.allclose(sa[0, :3], sb[0, :3], atol=1e-6) != changes, attention
        assert not np.allclose(sa[0, 3], sb[0, 3])


def test_padding_on_either_side_changes_nothing():
    module, params = _tiny()
    row = [11, 12, 13, 14, 15]
    alone = _states(module, params, [row])[0]
    right = _states(module, params, [row + [-1, -1, -1]])[0]
    left = _states(module, params, [[-1, -1, -1] + row])[0]
    np.testing.assert_allclose(right[:5], alone, atol=1e-5)
    np.testing.assert_allclose(left[3:], alone, atol=1e-5)
    for pooling in ("last_token", "mean", "weighted_mean"):
        m = DecoderLM(**TINY, pooling=pooling)
        embs = [np.asarray(m.apply({"params": params}, jnp.asarray(x))[0])
                for x in ([row], [row + [-1] * 3], [[-1] * 3 + row])]
        np.testing.assert_allclose(embs[1], embs[0], atol=1e-5)
        np.testing.assert_allclose(embs[2], embs[0], atol=1e-5)


def test_poolings_by_hand():
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.normal(size=(3, 5, 4)), jnp.float32)
    ids = jnp.asarray([[-1, -1, 7, 8, 9],       # left padded
                       [-2 - 3, -2 - 4, 5, -1, -1],  # instruction, text, right padding
                       [1, 2, 3, 4, 5]])
    _, valid, pooled = split_ids(ids)
    np.testing.assert_array_equal(last_valid(valid), [4, 2, 4])
    t = np.asarray(tokens)
    np.testing.assert_allclose(pool("last_token", tokens, valid, pooled),
                               [t[0, 4], t[1, 2], t[2, 4]], rtol=1e-6)
    np.testing.assert_allclose(pool("mean", tokens, valid, pooled),
                               [t[0, 2:].mean(0), t[1, 2], t[2].mean(0)], rtol=1e-6)
    np.testing.assert_allclose(pool("weighted_mean", tokens, valid, pooled),
                               [(1 * t[0, 2] + 2 * t[0, 3] + 3 * t[0, 4]) / 6, t[1, 2],
                                np.einsum("t,td->d", np.arange(1, 6), t[2]) / 15], rtol=1e-5)


def test_instruction_tokens_are_read_but_not_pooled():
    module, params = _tiny(pooling="mean")
    text = [20, 21, 22]
    with_instruction = [[-2 - 40, -2 - 41] + text]
    plain_prefix = [[40, 41] + text]
    states = _states(module, params, with_instruction)
    np.testing.assert_allclose(states, _states(module, params, plain_prefix), atol=1e-6)
    emb = np.asarray(module.apply({"params": params}, jnp.asarray(with_instruction))[0])
    np.testing.assert_allclose(emb[0], states[0, 2:].mean(0), atol=1e-6)
    assert not np.allclose(emb, np.asarray(module.apply({"params": params},
                                                        jnp.asarray([text]))[0]), atol=1e-3)


def test_attention_misspelt_is_one_line():
    module = DecoderLM(**TINY, attention="bidirectonal")
    with pytest.raises(ValueError, match="choose from: causal, bidirectional"):
        module.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))


# ------------------------------------------------------------- next-token logits and cross-entropy
def _log_softmax(z):
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def test_next_token_logits_and_cross_entropy_by_hand():
    """Logits are the final states times the tied embedding; each scored position's loss is
    logsumexp minus the next token's logit, computed here in float64 numpy; padding (either side)
    and instruction tokens are scored neither as context nor as target."""
    module, params = _tiny()
    ids = np.asarray([[-1, -1, 7, 8, 9, 10],               # left padded: 3 predictions
                      [-2 - 3, -2 - 4, 5, 6, -1, -1],      # instruction, text, right padding: 1
                      [1, 2, 3, 4, 5, 6],                  # full: 5
                      [-1, -1, -1, -1, -1, 11]])           # one token: none
    tokens = _states(module, params, ids)
    emb = np.asarray(params["embed_tokens"]["embedding"], np.float64)
    logits = np.asarray(next_token_logits(params, jnp.asarray(tokens)))
    assert logits.shape == (4, 6, TINY["vocab_size"]) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, tokens.astype(np.float64) @ emb.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(
        next_token_logits({"params": params}, jnp.asarray(tokens)), logits)  # variables too
    with pytest.raises(ValueError, match="hold no embed_tokens/embedding .top level: encoder"):
        next_token_logits({"encoder": params}, jnp.asarray(tokens))
    valid = ids != -1
    mask = np.asarray(next_token_mask(jnp.asarray(ids), jnp.asarray(valid)))
    want_mask = np.zeros((4, 5), bool)
    want_mask[0, 2:], want_mask[1, 2], want_mask[2, :] = True, True, True
    np.testing.assert_array_equal(mask, want_mask)
    ce = np.asarray(next_token_cross_entropy(jnp.asarray(logits), jnp.asarray(ids),
                                             jnp.asarray(valid)))
    assert ce.shape == (4, 5)
    z = tokens.astype(np.float64) @ emb.T
    want = np.zeros((4, 5))
    for b, t in zip(*np.nonzero(want_mask)):
        zt = z[b, t]
        want[b, t] = np.log(np.exp(zt - zt.max()).sum()) + zt.max() - zt[ids[b, t + 1]]
    np.testing.assert_allclose(ce, want, rtol=1e-5, atol=1e-5)
    assert (ce[want_mask] > 0).all() and (ce[~want_mask] == 0).all()
    np.testing.assert_allclose(-ce[2], _log_softmax(z[2, :-1])[np.arange(5), ids[2, 1:]],
                               rtol=1e-5)
    # the caller's valid mask is honoured too (e.g. a vocabulary's own padding id)
    valid2 = valid.copy()
    valid2[2, 3] = False
    ce2 = np.asarray(next_token_cross_entropy(jnp.asarray(logits), jnp.asarray(ids),
                                              jnp.asarray(valid2)))
    np.testing.assert_array_equal(ce2[2], np.where([1, 1, 0, 0, 1], ce[2], 0))


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 128])
def test_chunked_cross_entropy_equals_the_whole_logits_one(chunk):
    """Chunks of positions (the last one padded) give the whole-logits loss; an untied head
    given as ``head_VxD`` replaces the embedding in both."""
    module, params = _tiny()
    ids = jnp.asarray([[-2 - 9, 7, 8, 9, 10, 11], [1, 2, 3, -1, -1, -1]])
    valid = ids != -1
    tokens = jnp.asarray(_states(module, params, ids))
    head = jnp.asarray(np.random.default_rng(1).normal(size=(TINY["vocab_size"], TINY["width"])),
                       jnp.float32)
    for h in (None, head):
        whole = next_token_cross_entropy(next_token_logits(params, tokens, h), ids, valid)
        chunked = jax.jit(next_token_cross_entropy_chunked, static_argnames="chunk")(
            params, tokens, ids, valid, head_VxD=h, chunk=chunk)
        np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(next_token_logits(params, tokens, head),
                               np.asarray(tokens) @ np.asarray(head).T, rtol=1e-5, atol=1e-5)
    one = next_token_cross_entropy_chunked(params, tokens[:, :1], ids[:, :1], valid[:, :1])
    assert one.shape == (2, 0)
    assert next_token_cross_entropy(next_token_logits(params, tokens[:, :1]), ids[:, :1],
                                    valid[:, :1]).shape == (2, 0)
    with pytest.raises(ValueError, match="chunk=0 must be >= 1"):
        next_token_cross_entropy_chunked(params, tokens, ids, valid, chunk=0)


def _hf_folder(folder, params, **config):
    from safetensors.numpy import save_file
    folder.mkdir()
    tensors = {**hf_tensors(params), **config.pop("extra", {})}
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": TINY["vocab_size"], "hidden_size": TINY["width"],
        "num_hidden_layers": TINY["depth"], "num_attention_heads": TINY["num_heads"],
        "num_key_value_heads": TINY["num_kv_heads"], "intermediate_size": TINY["mlp_dim"],
        "rope_theta": TINY["rope_base"], "rms_norm_eps": TINY["eps"], "eos_token_id": 2,
        **config}))
    return folder


def test_an_untied_output_head_is_read_beside_the_parameters(tmp_path, monkeypatch):
    """A tied checkpoint's head is its embedding (``output_head`` None); an untied one's
    ``output.weight`` (GGUF) or ``lm_head.weight`` (Hugging Face, unless ``tie_word_embeddings``)
    comes back from ``output_head`` and ``load_decoder_lm(...).head``, never in the parameter
    tree."""
    import gguf
    _, params = _tiny()
    head = np.random.default_rng(2).normal(size=(TINY["vocab_size"], TINY["width"])).astype(
        np.float32)
    write_gguf(tmp_path / "tied.gguf", params)
    assert output_head(tmp_path / "tied.gguf") is None
    assert load_decoder_lm(tmp_path / "tied.gguf").head is None
    write_header = gguf.GGUFWriter.write_header_to_file

    def with_output(self, *a, **kw):  # llama.cpp's untied head, added as the last tensor
        self.add_tensor("output.weight", head)
        return write_header(self, *a, **kw)

    monkeypatch.setattr(gguf.GGUFWriter, "write_header_to_file", with_output)
    write_gguf(tmp_path / "untied.gguf", params)
    monkeypatch.undo()
    np.testing.assert_array_equal(output_head(tmp_path / "untied.gguf"), head)
    loaded = load_decoder_lm(tmp_path / "untied.gguf")
    np.testing.assert_array_equal(loaded.head, head)
    assert set(loaded.params) == set(params)  # the tree an embedder reads: no head in it
    folder = _hf_folder(tmp_path / "untied", params, extra={"lm_head.weight": head})
    np.testing.assert_array_equal(output_head(folder), head)
    tied = _hf_folder(tmp_path / "tied", params, extra={"lm_head.weight": head},
                      tie_word_embeddings=True)
    assert output_head(tied) is None
    assert output_head(_hf_folder(tmp_path / "plain", params)) is None
    bad = _hf_folder(tmp_path / "bad", params, extra={"lm_head.weight": head[:, :8].copy()})
    with pytest.raises(ValueError, match="'lm_head.weight' has shape"):
        output_head(bad)


# ------------------------------------------------------------------------------ GGUF and folders
def test_gguf_import_dequantises_every_type_and_unpermutes_queries_and_keys(tmp_path):
    module, params = _tiny()
    types = {"attn_q": "Q4_0", "attn_k": "Q4_1", "attn_v": "Q8_0", "attn_output": "F16",
             "ffn_gate": "BF16", "token_embd": "Q8_0"}
    stored = write_gguf(tmp_path / "tiny.gguf", params, types)
    header, loaded = read_decoder_weights(tmp_path / "tiny.gguf")
    assert header.module_fields() == {**TINY, "qkv_bias": False, **LLAMA_DEFAULTS}
    # every matrix equals the gguf package's own dequantisation of what was stored
    np.testing.assert_array_equal(loaded["embed_tokens"]["embedding"], stored["token_embd.weight"])
    np.testing.assert_array_equal(loaded["layer_1"]["gate_proj"]["kernel"],
                                  stored["blk.1.ffn_gate.weight"].T)
    np.testing.assert_array_equal(loaded["layer_0"]["up_proj"]["kernel"],
                                  np.asarray(params["layer_0"]["up_proj"]["kernel"]))
    # queries and keys come back in Hugging Face's order: stored as F32, they are exact
    f32 = tmp_path / "f32.gguf"
    write_gguf(f32, params)
    _, exact = read_decoder_weights(f32)
    for name in ("q_proj", "k_proj"):
        np.testing.assert_array_equal(exact["layer_0"][name]["kernel"],
                                      np.asarray(params["layer_0"][name]["kernel"]))
    ids = [[5, 6, 7, 8, 9]]
    np.testing.assert_allclose(_states(module, exact, ids), _states(module, params, ids),
                               atol=1e-6)


def test_a_hugging_face_folder_loads_the_same_model(tmp_path):
    from safetensors.numpy import save_file
    module, params = _tiny()
    folder = tmp_path / "hf"
    folder.mkdir()
    save_file(hf_tensors(params), str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": TINY["vocab_size"], "hidden_size": TINY["width"],
        "num_hidden_layers": TINY["depth"], "num_attention_heads": TINY["num_heads"],
        "num_key_value_heads": TINY["num_kv_heads"], "intermediate_size": TINY["mlp_dim"],
        "rope_theta": TINY["rope_base"], "rms_norm_eps": TINY["eps"], "eos_token_id": 2}))
    header, loaded = read_decoder_weights(folder)
    assert header.module_fields() == {**TINY, "qkv_bias": False, **LLAMA_DEFAULTS}
    chex.assert_trees_all_equal(loaded, jax.tree.map(np.asarray, params))


def test_the_gguf_tokenizer_keeps_control_tokens_whole(tmp_path):
    _, params = _tiny()
    write_gguf(tmp_path / "tiny.gguf", params)
    loaded = load_decoder_lm(tmp_path / "tiny.gguf")
    tok = loaded.tokenizer
    tokens, _ = byte_vocab()
    ids = tok.tokenize("<|im_start|>the the")
    assert ids[0] == tokens.index("<|im_start|>") and tokens.index("Ġthe") in ids
    assert tok.decode(ids) == "<|im_start|>the the"
    rows = tok.rows(["the"], prefix="the ", append_eos=True, max_len=8)
    # "the " + "the": [t, he, Ġthe]: the space goes with the text's word, "t he" are the prefix's
    assert rows[0][-1] == tok.eos_id and all(i <= -2 for i in rows[0][:2])
    assert rows[0][2] == tokens.index("Ġthe")


@pytest.mark.parametrize("case", ["architecture", "truncated", "not_gguf", "quantisation"])
def test_bad_gguf_files_are_one_line(tmp_path, case):
    _, params = _tiny()
    path = tmp_path / "bad.gguf"
    if case == "architecture":
        write_gguf(path, params, arch="gpt2")
        match = "architecture 'gpt2' is not read here; decoder_lm reads llama, qwen2"
    elif case == "truncated":
        write_gguf(path, params)
        path.write_bytes(path.read_bytes()[:5000])
        match = "damaged or truncated GGUF"
    elif case == "not_gguf":
        path.write_bytes(b"PK\x03\x04" + bytes(100))
        match = "is not a GGUF file"
    else:
        write_odd_gguf(path)
        match = "tensor 'token_embd.weight' of type Q8_1 cannot be dequantised"
    with pytest.raises(ValueError, match=match) as info:
        read_decoder_weights(path)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------ SmolLM2 parity
@pytest.mark.slow
@needs_smollm2
def test_smollm2_equals_transformers_on_both_padding_sides():
    """Token ids and final hidden states of 16 texts, batched with right and with left padding,
    equal transformers' LlamaModel from the same GGUF (stored by make_smollm2_reference.py); where
    transformers is installed, every layer is compared live as well."""
    ref = np.load(DATA / "smollm2_reference.npz")
    texts, off = [str(t) for t in ref["texts"]], ref["offsets"]
    loaded = load_decoder_lm("smollm2")
    h = read_header("smollm2")
    assert (h.width, h.depth, h.num_heads, h.num_kv_heads, h.mlp_dim, h.rope_base,
            h.vocab_size) == (576, 30, 9, 3, 1536, 100000.0, 49152)
    theirs = [list(ref["ids"][off[i]:off[i + 1]]) for i in range(len(texts))]
    assert [loaded.tokenizer.tokenize(t) for t in texts] == theirs
    module = loaded.module()
    apply = jax.jit(lambda p, x: module.apply({"params": p}, x)[1])
    live = _transformers_layers(theirs)
    for left in (False, True):
        ids = loaded.tokenizer.pad(theirs, left=left)
        feats = apply(loaded.params, jnp.asarray(ids))
        valid = ids != -1
        ours = np.asarray(feats["tokens"])
        for i in range(len(texts)):
            _close(ours[i][valid[i]], ref["states"][off[i]:off[i + 1]])
        for layer, (states, mask) in enumerate(live):
            for i in range(len(texts)):
                _close(np.asarray(feats["layers"][layer])[i][valid[i]], states[i][mask[i]])


@pytest.mark.slow
@needs_smollm2
def test_smollm2_next_token_predictions_equal_transformers():
    """Next-token logits through the tied embedding (SmolLM2's GGUF has no ``output.weight``)
    equal LlamaForCausalLM's on both padding sides: the first 64 logits and the log-normaliser at
    every token, each text token's log-probability of the next (``-next_token_cross_entropy``,
    whole and chunked) and the argmax everywhere (measured: 1.3e-4, 6.3e-5, 4.2e-5 and 195 of
    195; the reference's smallest top-two gap is 0.012)."""
    ref = np.load(DATA / "smollm2_reference.npz")
    off = ref["offsets"]
    loaded = load_decoder_lm("smollm2")
    assert loaded.head is None  # tied
    rows = [list(ref["ids"][off[i]:off[i + 1]]) for i in range(len(off) - 1)]
    module = loaded.module()
    apply = jax.jit(lambda p, x: module.apply({"params": p}, x)[1]["tokens"])
    chunked = jax.jit(next_token_cross_entropy_chunked, static_argnames="chunk")
    for left in (False, True):
        ids = jnp.asarray(loaded.tokenizer.pad(rows, left=left))
        valid = ids != -1
        tokens = apply(loaded.params, ids)
        logits = next_token_logits(loaded.params, tokens)
        ce = np.asarray(next_token_cross_entropy(logits, ids, valid))
        np.testing.assert_allclose(chunked(loaded.params, tokens, ids, valid, chunk=7), ce,
                                   atol=1e-5)
        v = np.asarray(valid)
        ours = np.asarray(logits)[v]  # [N, V], text after text as the reference's
        np.testing.assert_allclose(ours[:, :64], ref["logits64"], atol=1e-3)
        np.testing.assert_allclose(np.asarray(jax.nn.logsumexp(logits, -1))[v],
                                   ref["logsumexp"], atol=5e-4)
        np.testing.assert_array_equal(ours.argmax(-1), ref["next_argmax"])
        logprob = np.full(v.shape, np.nan, np.float32)
        logprob[:, :-1] = np.where(np.asarray(next_token_mask(ids, valid)), -ce, np.nan)
        np.testing.assert_allclose(logprob[v], ref["next_logprob"], atol=5e-4)  # NaN: last


def _close(a, b, rtol=1e-4):
    rel = np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)
    assert rel.max() < rtol, rel.max()


def _transformers_layers(ids):
    """Each block's output from transformers, where it is installed (else nothing)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return []
    sys.path.insert(0, str(DATA))
    from make_smollm2_reference import reference
    from repr_jax.encoders.decoder_lm_weights import smollm2_file
    path = smollm2_file()
    _, out, _, _ = reference(str(path.parent), path.name)
    states, mask = out["right"]
    return [(h, mask) for h in states[:-1]]  # the last is after the final norm: checked above


@pytest.mark.slow
@needs_smollm2
def test_smollm2_completes_a_sentence():
    """The imported weights are the model's: greedy decoding with the tied embedding as the
    output head continues "The capital of France is" with " Paris"."""
    loaded = load_decoder_lm("smollm2")
    module, tok = loaded.module(), loaded.tokenizer
    ids = tok.tokenize("The capital of France is")
    apply = jax.jit(lambda p, x: module.apply({"params": p}, x)[1]["tokens"])
    from repr_jax.encoders.pretrained import encode
    first = np.asarray(apply(loaded.params, jnp.asarray(tok.pad([ids])))[0, len(ids) - 1])
    np.testing.assert_allclose(encode(loaded, ["The capital of France is", "a"])[0], first,
                               rtol=1e-5, atol=1e-5)  # encode: the last token's final state
    for _ in range(2):
        h = apply(loaded.params, jnp.asarray(tok.pad([ids])))[0, len(ids) - 1]
        ids.append(int(jnp.argmax(loaded.params["embed_tokens"]["embedding"] @ h)))
    assert tok.decode(ids).startswith("The capital of France is Paris")
